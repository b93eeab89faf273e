"""Prometheus metrics: kube-proxy's sync metrics under an ``nftproxy_`` prefix."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
