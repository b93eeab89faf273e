"""Prometheus metrics: kube-proxy's sync metrics under an ``nftproxy_`` prefix; the localhost
NodePort proxy's under kube-proxy v1.37's own names (``kubeproxy_nftables_localhost_…``, label
``ip_family``), so its dashboards and alerts work unchanged, plus ours."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("nftproxy.metrics")

_BUCKETS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.registry = r
        self.sync_duration = Histogram(
            "nftproxy_sync_proxy_rules_duration_seconds", "Compile + commit of a sync", buckets=_BUCKETS, registry=r
        )
        self.full_sync_duration = Histogram(
            "nftproxy_sync_full_proxy_rules_duration_seconds",
            "Full syncs (compared with the table read back from the kernel)",
            buckets=_BUCKETS,
            registry=r,
        )
        self.partial_sync_duration = Histogram(
            "nftproxy_sync_partial_proxy_rules_duration_seconds",
            "Partial syncs (only what changed)",
            buckets=_BUCKETS,
            registry=r,
        )
        self.network_programming = Histogram(
            "nftproxy_network_programming_duration_seconds",
            "From the EndpointSlice's last-change-trigger-time to its rules committed",
            buckets=(*_BUCKETS, 32.768, 65.536),
            registry=r,
        )
        self.last_sync = Gauge(
            "nftproxy_sync_proxy_rules_last_timestamp_seconds", "Time of the last successful sync", registry=r
        )
        self.last_queued = Gauge(
            "nftproxy_sync_proxy_rules_last_queued_timestamp_seconds", "Time a change was last queued", registry=r
        )
        self.service_changes_pending = Gauge(
            "nftproxy_sync_proxy_rules_service_changes_pending", "Service changes not yet synced", registry=r
        )
        self.endpoint_changes_pending = Gauge(
            "nftproxy_sync_proxy_rules_endpoint_changes_pending", "EndpointSlice changes not yet synced", registry=r
        )
        self.service_changes = Counter(
            "nftproxy_sync_proxy_rules_service_changes_total", "Service changes seen", registry=r
        )
        self.endpoint_changes = Counter(
            "nftproxy_sync_proxy_rules_endpoint_changes_total", "EndpointSlice changes seen", registry=r
        )
        self.sync_failures = Counter(
            "nftproxy_sync_proxy_rules_nftables_sync_failures_total", "Syncs the kernel refused", registry=r
        )
        self.watch_events = Counter(
            "nftproxy_watch_events_total", "Watch events received, per resource", ["resource"], registry=r
        )
        self.services = Gauge("nftproxy_services", "Services programmed", registry=r)
        self.endpoints = Gauge("nftproxy_endpoints", "Endpoints programmed", registry=r)
        self.skipped = Gauge("nftproxy_skipped_objects", "Objects left out for bad input", registry=r)
        # -- localhost NodePorts (operator/localhost.py), label ip_family: IPv4 | IPv6 ---------
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

    def count_localhost_rejections(self, read: Callable[[], dict[tuple[str, str], int]]) -> None:
        """``kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family, protocol}``,
        read at each scrape by ``read`` (the table's named counters, as kube-proxy v1.37's)."""
        self.registry.register(_Rejections(read))


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
