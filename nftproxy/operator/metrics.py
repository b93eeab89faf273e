"""Prometheus metrics: kube-proxy's own (``kubeproxy_*``, the names, types, labels and buckets of
kube-proxy v1.37's nftables mode), so its users' dashboards and alerts keep working, and nftproxy's
extras (``nftproxy_*``), the localhost NodePort proxy's included. The conformance suite compares
them with the real kube-proxy's (tests/conformance/test_differential.py, ``test_metrics_as_kube_proxy``).

kube-proxy runs one proxier per IP family and labels most series ``ip_family``; one nftproxy sync
programs both families' tables, so a sync's duration, time and failure count for each family.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from nftproxy import __version__
from nftproxy.diagnose.counters import DROP, REJECT, PortCounts, PortKey

log = logging.getLogger("nftproxy.metrics")

FAMILIES = ("IPv4", "IPv6")  # the ip_family label's values, as kube-proxy's
_BUCKETS = tuple(0.001 * 2**i for i in range(15))  # kube-proxy: ExponentialBuckets(0.001, 2, 15)
# kube-proxy's network programming buckets: 0.25 s, 0.5 s, 1..59 s, 60..115 s by 5, 2..5 min by 30 s
# client-go's rest_client_request_duration_seconds buckets (k8s.io/component-base
# metrics/prometheus/restclient/metrics.go)
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
_PROGRAMMING_BUCKETS = (
    0.25,
    0.5,
    *range(1, 60),
    *range(60, 120, 5),
    *range(120, 330, 30),
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.registry = r
        fam = ["ip_family"]
        # -- kube-proxy's (pkg/proxy/metrics, nftables mode) --------------------------------
        self.sync_duration = Histogram(
            "kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", fam,
            buckets=_BUCKETS, registry=r,
        )  # fmt: skip
        self.full_sync_duration = Histogram(
            "kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs",
            fam, buckets=_BUCKETS, registry=r,
        )  # fmt: skip
        self.partial_sync_duration = Histogram(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs", fam, buckets=_BUCKETS, registry=r,
        )  # fmt: skip
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds (from an EndpointSlice's "
            "last-change-trigger-time to its rules committed)",
            fam, buckets=_PROGRAMMING_BUCKETS, registry=r,
        )  # fmt: skip
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced",
            fam, registry=r,
        )  # fmt: skip
        self.last_queued = Gauge(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued", fam, registry=r,
        )  # fmt: skip
        self.service_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes", registry=r
        )
        self.endpoint_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes", registry=r
        )
        self.service_changes = Counter(
            "kubeproxy_sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes", registry=r
        )
        self.endpoint_changes = Counter(
            "kubeproxy_sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes", registry=r
        )
        self.sync_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "Cumulative proxy nftables sync failures", fam, registry=r,
        )  # fmt: skip
        self.cleanup_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
            "Cumulative proxy nftables cleanup failures (nftproxy: the stale conntrack and affinity cleanup "
            "after a sync)", fam, registry=r,
        )  # fmt: skip
        self.no_local_endpoints = Gauge(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints", ["traffic_policy", "ip_family"],
            registry=r,
        )  # fmt: skip
        self.healthz = Counter(
            "kubeproxy_proxy_healthz_total", "Cumulative proxy healthz HTTP status", ["code"], registry=r
        )
        self.livez = Counter("kubeproxy_proxy_livez_total", "Cumulative proxy livez HTTP status", ["code"], registry=r)
        self.conntrack_duration = Histogram(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "ReconcileConntrackFlowsLatency latency in seconds", fam, buckets=_BUCKETS, registry=r,
        )  # fmt: skip
        self.conntrack_deleted = Counter(
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "Cumulative conntrack flows deleted by conntrack reconciler", fam, registry=r,
        )  # fmt: skip
        # -- client-go's, as every Kubernetes component exports them (the kubernetes-mixin's proxy
        # dashboard reads them): each apiserver request of ours (operator/kube.py) and of kopf's
        # (operator/restclient.py), by status code ("<error>": no answer), method and apiserver
        # host:port; the duration of every request but a watch (client-go: not of a watch either)
        self.rest_requests = Counter(
            "rest_client_requests_total", "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"], registry=r,
        )  # fmt: skip
        self.rest_duration = Histogram(
            "rest_client_request_duration_seconds", "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"], buckets=_REST_BUCKETS, registry=r,
        )  # fmt: skip
        for f in FAMILIES:  # every family's series exists from the start, as kube-proxy's
            for m in (self.sync_duration, self.full_sync_duration, self.partial_sync_duration):
                m.labels(f)
            for c in (self.sync_failures, self.cleanup_failures, self.conntrack_deleted):
                c.labels(f)
            for policy in ("internal", "external"):
                self.no_local_endpoints.labels(policy, f).set(0)
        # -- the process's, as every Prometheus client library's: process_cpu_seconds_total,
        # process_resident_memory_bytes, process_start_time_seconds, open fds (read from /proc at
        # each scrape; the mixin's Proxy dashboard draws the first two). No go_goroutines: not Go.
        ProcessCollector(registry=r)
        # -- nftproxy's own -------------------------------------------------------------------
        # nftproxy_build_info{version="0.4.0"} 1: which release runs on each node (as
        # kubernetes_build_info tells a Kubernetes component's), e.g. during a rolling upgrade.
        self.build_info = Info("nftproxy_build", "The nftproxy release running", registry=r)
        self.build_info.info({"version": __version__})
        self.watch_events = Counter(
            "nftproxy_watch_events_total", "Watch events received, per resource", ["resource"], registry=r
        )
        self.services = Gauge("nftproxy_services", "Services programmed", registry=r)
        self.endpoints = Gauge("nftproxy_endpoints", "Endpoints programmed", registry=r)
        self.skipped = Gauge("nftproxy_skipped_objects", "Objects left out for bad input", registry=r)
        # the ProxyStatus InSync condition, read at each scrape (operator/main.py wires it)
        self.in_sync = Gauge(
            "nftproxy_in_sync",
            "1 when the node's rules hold every change (the ProxyStatus condition InSync is True), else 0",
            registry=r,
        )
        self.kube_proxy_rules = Gauge(
            "nftproxy_kube_proxy_rules_detected",
            "1 when kube-proxy's rules were found on the node at the last check (the ProxyStatus condition "
            "KubeProxyDetected), 0 when not found or not checked (--kube-proxy-check-period 0)",
            registry=r,
        )
        # -- localhost NodePorts (nftproxy/localhost_proxy/), label ip_family: IPv4 | IPv6 ---------
        self.localhost_listeners = Gauge(
            "kubeproxy_nftables_localhost_nodeport_listeners",
            "Number of active localhost NodePort userspace proxy listeners.",
            ["ip_family"],
            registry=r,
        )
        self.localhost_listener_failures = Counter(
            "kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total",
            "Number of localhost NodePort userspace proxy listener creation failures.",
            ["ip_family"],
            registry=r,
        )
        self.localhost_dial_retries = Counter(
            "nftproxy_localhost_nodeport_dial_retries_total",
            "Connections to an endpoint that failed (refused, unreachable, timed out) after which "
            "the localhost NodePort proxy tried another endpoint",
            ["ip_family"],
            registry=r,
        )
        self.localhost_unserved = Counter(
            "nftproxy_localhost_nodeport_unserved_connections_total",
            "Localhost NodePort clients closed because no endpoint answered within the attempts",
            ["ip_family"],
            registry=r,
        )
        self.localhost_connections = Counter(
            "nftproxy_localhost_nodeport_connections_total",
            "Localhost NodePort connections proxied to an endpoint",
            ["ip_family"],
            registry=r,
        )

    # -- one nftproxy sync is both families' ------------------------------------------------
    def queued(self, now: float) -> None:
        for f in FAMILIES:
            self.last_queued.labels(f).set(now)

    def synced(self, seconds: float, full: bool, now: float) -> None:
        for f in FAMILIES:
            self.sync_duration.labels(f).observe(seconds)
            (self.full_sync_duration if full else self.partial_sync_duration).labels(f).observe(seconds)
            self.last_sync.labels(f).set(now)

    def api_request(self, method: str, code: str, host: str, seconds: float | None) -> None:
        """One request to the apiserver answered with ``code`` (``<error>``: none), ``seconds``
        long (None: a watch, whose duration is not observed)."""
        self.rest_requests.labels(code, method, host).inc()
        if seconds is not None:
            self.rest_duration.labels(method, host).observe(seconds)

    def sync_failed(self) -> None:
        for f in FAMILIES:
            self.sync_failures.labels(f).inc()

    def count_localhost_rejections(self, read: Callable[[], dict[tuple[str, str], int]]) -> None:
        """``kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family, protocol}``,
        read at each scrape by ``read`` (the table's named counters, as kube-proxy v1.37's)."""
        self.registry.register(_Rejections(read))

    def count_service_traffic(self, read: Callable[[], dict[str, dict[PortKey, PortCounts]]]) -> None:
        """``nftproxy_service_*_total`` (--service-counters), read at each scrape by ``read``:
        ip_family -> each Service port's counts (diagnose/counters.py). A Service port's series
        exist while it is in the table."""
        self.registry.register(_ServiceTraffic(read))


class _Rejections(Collector):
    def __init__(self, read: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "kubeproxy_nftables_localhost_nodeport_rejected_packets_total",
            "Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected",
            labels=["ip_family", "protocol"],
        )
        try:
            values = self.read()
        except Exception as e:  # a scrape never fails for it
            log.debug("reading the localhost NodePort counters: %s", e)
            values = {}
        for (ip_family, protocol), packets in sorted(values.items()):
            family.add_metric([ip_family, protocol], packets)
        yield family


SERVICE_LABELS = ["namespace", "service", "port", "protocol", "kind", "ip_family"]


class _ServiceTraffic(Collector):
    """Each Service port's counters, per kind of frontend (ClusterIP, NodePort, External: its
    externalIPs and LoadBalancer IPs), as the table's counting sets hold them at the scrape."""

    def __init__(self, read: Callable[[], dict[str, dict[PortKey, PortCounts]]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        def family(name: str, what: str, extra: tuple[str, ...] = ()) -> CounterMetricFamily:
            return CounterMetricFamily(name, what, labels=[*SERVICE_LABELS, *extra])

        packets = family("nftproxy_service_packets_total", "Packets of connections to a Service port, both ways")
        size = family("nftproxy_service_bytes_total", "Bytes of connections to a Service port, both ways")
        new = family("nftproxy_service_connections_total", "New connections to a Service port")
        refused = family(
            "nftproxy_service_no_endpoint_packets_total",
            "Packets to a Service port rejected (no endpoints) or dropped (no endpoints on this node, Local policy)",
            ("verdict",),
        )
        try:
            values = self.read()
        except Exception as e:  # a scrape never fails for it
            log.warning("reading the Service counters: %s", e)
            values = {}
        for ip_family, ports in sorted(values.items()):
            for k, c in sorted(ports.items()):
                labels = [k.namespace, k.service, k.port, k.protocol, k.kind, ip_family]
                packets.add_metric(labels, c.packets)
                size.add_metric(labels, c.bytes)
                new.add_metric(labels, c.connections)
                for verdict, n in ((REJECT, c.rejected), (DROP, c.dropped)):
                    if n or c.refusing == verdict:  # counted, or refusing now (from 0)
                        refused.add_metric([*labels, verdict], n)
        yield from (packets, size, new, refused)
