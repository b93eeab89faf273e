"""kube-proxy's health rule and answers (pkg/proxy/healthcheck, v1.37.2), pure: plain numbers in,
status codes, headers and bodies out. No clock, no server: the syncer feeds it the monotonic
time of its events, the HTTP servers (operator/health.py) render what it says.

The rule (ProxyHealthServer): the proxy is healthy unless an update was queued (a Service,
EndpointSlice, Node or ServiceCIDR change after the initial lists) and no sync has succeeded
since, for ``timeout`` (kube-proxy: 2 x --sync-period) or longer. Before the sync loop has
started, and while no update waits, it is healthy whatever the syncs do: a failing periodic sync
with nothing queued leaves the rules as they were, still right.

What depends on it, as kube-proxy: ``/livez`` (200 or 503), ``/healthz`` (also 503 while the Node
is being deleted or tainted ``ToBeDeletedByClusterAutoscaler``), and every healthCheckNodePort
(503 while unhealthy, whatever its local endpoints: load balancers drain the node).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

# kube-proxy runs one proxier per IP family and reports each; one nftproxy sync is both families'
FAMILIES = ("IPv4", "IPv6")

JSON_HEADERS = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}
# a healthCheckNodePort's answer also carries the count of local endpoints (kube-proxy's hcHandler)
WEIGHT_HEADER = "X-Load-Balancing-Endpoint-Weight"
# Go's http.NotFound, what kube-proxy's healthz server answers on any other path
NOT_FOUND = (
    404,
    {"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"},
    b"404 page not found\n",
)

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


@dataclass(frozen=True)
class Health:
    """The proxy's health at ``now`` (monotonic seconds, as every instant here)."""

    healthy: bool
    now: float
    last_updated: float | None  # the last successful sync (or the start of the sync loop)
    queued_since: float | None  # the oldest update queued and not synced yet
    timeout: float

    def message(self) -> str:
        if self.healthy:
            return f"no change has waited {self.timeout:.0f}s (2 x --sync-period) for a sync"
        assert self.queued_since is not None
        return (
            f"a change queued {self.now - self.queued_since:.0f}s ago is not synced yet "
            f"(unhealthy after {self.timeout:.0f}s: 2 x --sync-period)"
        )


class ProxyHealth:
    """kube-proxy's ProxyHealthServer state: ``updated`` (a sync succeeded, or the sync loop
    starts), ``queued_update`` (a change waits for a sync), ``health`` (the rule at an instant)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.last_updated: float | None = None
        self.oldest_queued: float | None = None

    def updated(self, now: float) -> None:
        self.oldest_queued = None
        self.last_updated = now

    def queued_update(self, now: float) -> None:
        if self.oldest_queued is None:
            self.oldest_queued = now

    def health(self, now: float) -> Health:
        late = (
            self.last_updated is not None
            and self.oldest_queued is not None
            and now - self.oldest_queued >= self.timeout
        )
        return Health(not late, now, self.last_updated, self.oldest_queued, self.timeout)


def go_time(ns: int | None) -> str:
    """A wall-clock instant (ns since the epoch) as Go's time.Time marshals it in UTC
    (RFC 3339 with nanoseconds, trailing zeros dropped); None: Go's zero time."""
    if ns is None:
        return "0001-01-01T00:00:00Z"
    seconds, frac = divmod(ns, 10**9)
    base = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{frac:09d}".rstrip("0")
    return f"{base}.{digits}Z" if digits else f"{base}Z"


def proxy_answer(h: Health, wall_ns: int, node_eligible: bool | None) -> Answer:
    """``/healthz`` (``node_eligible`` given) or ``/livez`` (None), as kube-proxy's handlers:
    ``wall_ns`` is the wall-clock time at ``h.now``. While healthy, ``lastUpdated`` is the current
    time (kube-proxy's backward compatibility); ``status`` has each family's own."""

    def wall(t: float | None) -> str:
        return go_time(None if t is None else wall_ns - round((h.now - t) * 1e9))

    ok = h.healthy and node_eligible is not False
    body: dict[str, object] = {"lastUpdated": wall(h.now if ok else h.last_updated), "currentTime": wall(h.now)}
    if node_eligible is not None:
        body["nodeEligible"] = node_eligible
    body["healthy"] = h.healthy
    if h.last_updated is not None:
        body["status"] = {f: {"lastUpdated": wall(h.last_updated), "healthy": h.healthy} for f in FAMILIES}
    return (200 if ok else 503), dict(JSON_HEADERS), json.dumps(body, separators=(",", ":")).encode()


def service_answer(namespace: str, name: str, local_endpoints: int, proxy_healthy: bool) -> Answer:
    """A healthCheckNodePort's answer, byte for byte kube-proxy's (its dedented, tab-indented
    JSON): 200 while the node has a ready endpoint of the Service and the proxy is healthy."""
    body = "\n".join(
        (
            "{",
            '\t"service": {',
            f'\t\t"namespace": {json.dumps(namespace)},',
            f'\t\t"name": {json.dumps(name)}',
            "\t},",
            f'\t"localEndpoints": {local_endpoints},',
            f'\t"serviceProxyHealthy": {json.dumps(proxy_healthy)}',
            "}",
        )
    )
    headers = {**JSON_HEADERS, WEIGHT_HEADER: str(local_endpoints)}
    return (200 if local_endpoints and proxy_healthy else 503), headers, body.encode()
