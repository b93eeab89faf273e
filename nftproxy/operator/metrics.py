"""Prometheus metrics: kube-proxy's own (``kubeproxy_*``, the names, types, labels and buckets of
kube-proxy v1.37's nftables mode), so its users' dashboards and alerts keep working, and nftproxy's
extras (``nftproxy_*``). tests/conformance/test_metrics.py compares them with the real kube-proxy's.

kube-proxy runs one proxier per IP family and labels most series ``ip_family``; one nftproxy sync
programs both families' tables, so a sync's duration, time and failure count for each family.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

FAMILIES = ("IPv4", "IPv6")  # the ip_family label's values, as kube-proxy's
_BUCKETS = tuple(0.001 * 2**i for i in range(15))  # kube-proxy: ExponentialBuckets(0.001, 2, 15)
# kube-proxy's network programming buckets: 0.25 s, 0.5 s, 1..59 s, 60..115 s by 5, 2..5 min by 30 s
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
        for f in FAMILIES:  # every family's series exists from the start, as kube-proxy's
            for m in (self.sync_duration, self.full_sync_duration, self.partial_sync_duration):
                m.labels(f)
            for c in (self.sync_failures, self.cleanup_failures, self.conntrack_deleted):
                c.labels(f)
            for policy in ("internal", "external"):
                self.no_local_endpoints.labels(policy, f).set(0)
        # -- nftproxy's own -------------------------------------------------------------------
        self.watch_events = Counter(
            "nftproxy_watch_events_total", "Watch events received, per resource", ["resource"], registry=r
        )
        self.services = Gauge("nftproxy_services", "Services programmed", registry=r)
        self.endpoints = Gauge("nftproxy_endpoints", "Endpoints programmed", registry=r)
        self.skipped = Gauge("nftproxy_skipped_objects", "Objects left out for bad input", registry=r)

    # -- one nftproxy sync is both families' ------------------------------------------------
    def queued(self, now: float) -> None:
        for f in FAMILIES:
            self.last_queued.labels(f).set(now)

    def synced(self, seconds: float, full: bool, now: float) -> None:
        for f in FAMILIES:
            self.sync_duration.labels(f).observe(seconds)
            (self.full_sync_duration if full else self.partial_sync_duration).labels(f).observe(seconds)
            self.last_sync.labels(f).set(now)

    def sync_failed(self) -> None:
        for f in FAMILIES:
            self.sync_failures.labels(f).inc()
