"""Which endpoints a Service port uses on this node (kube-proxy's CategorizeEndpoints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nftproxy.model.types import Endpoint, EndpointSlice, ServicePort


@dataclass(frozen=True)
class Target:
    """One endpoint of one Service port: address, port, and the endpoint it came from."""

    address: str
    port: int
    endpoint: Endpoint


def targets(port: ServicePort, slices: Iterable[EndpointSlice]) -> list[Target]:
    """Endpoints of ``port`` from the Service's slices (of one family), matched by port name.

    The EndpointSlice controller resolves named targetPorts per slice, so the slice's port with the
    Service port's name (and protocol) gives this slice's endpoint port. Duplicates (an endpoint
    listed by two slices) count once.
    """
    found: dict[tuple[str, int], Target] = {}
    for s in slices:
        number = next((p.port for p in s.ports if p.name == port.name and p.protocol == port.protocol), None)
        if number is None:
            continue
        for ep in s.endpoints:
            found.setdefault((ep.address, number), Target(ep.address, number, ep))
    return [found[k] for k in sorted(found)]


def cluster_endpoints(all_targets: list[Target]) -> list[Target]:
    """Ready endpoints; when none is ready, the serving and terminating ones (kube-proxy's fallback)."""
    ready = [t for t in all_targets if t.endpoint.ready]
    if ready:
        return ready
    return [t for t in all_targets if t.endpoint.serving and t.endpoint.terminating]
