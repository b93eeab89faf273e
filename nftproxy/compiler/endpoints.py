"""Which endpoints a Service port uses on this node: kube-proxy's CategorizeEndpoints, with its
topology rules (hints for this node / this zone) and terminating-endpoint fallbacks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from nftproxy.model.types import Endpoint, EndpointSlice, ServicePort

# The one speed trick of the compiler: ~10^5 Targets per full compile, and a NamedTuple's own
# __new__ is a Python frame; tuple.__new__ skips it (docs/performance.md, bench.dataplane).
_new = tuple.__new__


class Target(NamedTuple):
    """One endpoint of one Service port: address, port, and the endpoint it came from.

    A NamedTuple: ~10^5 are made per full compile, and a frozen dataclass costs twice as much."""

    address: str
    port: int
    endpoint: Endpoint


@dataclass(frozen=True, slots=True)
class Categorized:
    cluster: list[Target]  # for traffic under a Cluster policy (topology-filtered)
    local: list[Target]  # for traffic under a Local policy: this node's endpoints
    any_usable: bool  # a usable endpoint exists anywhere (no local one -> drop, none -> reject)


def _replaces(new: Endpoint) -> bool:
    """Within one slice, upstream's rule (endpointslicecache.go addEndpoints): a later copy of an
    ip:port replaces an earlier one unless it is terminating (kube-proxy v1.36+,
    kubernetes#135593: an IP reused by a new pod before the old Pod object is gone)."""
    return not new.terminating


def _wins(new: Endpoint, old: Endpoint, node: str | None) -> bool:
    """Of two copies of one ip:port in two slices: a non-terminating copy beats a terminating one
    (as upstream, whatever the order); between equals, the copy on this node, then the later one
    (upstream walks the slices in Go's map order, random: this choice is the same at every sync)."""
    if new.terminating != old.terminating:
        return not new.terminating
    if node is not None and (new.node_name == node) != (old.node_name == node):
        return new.node_name == node
    return True


def targets(port: ServicePort, slices: Sequence[EndpointSlice], node: str | None = None) -> list[Target]:
    """Endpoints of ``port`` from the Service's slices (of one family), matched by port name.

    The EndpointSlice controller resolves named targetPorts per slice, so the slice's port with the
    Service port's name (and protocol) gives this slice's endpoint port. Duplicates (an endpoint
    listed twice) count once: within one slice chosen as upstream (:func:`_replaces`), between
    slices by :func:`_wins`.
    """
    if len(slices) == 1:  # the common case: one slice, one port number (sorted by address)
        s = slices[0]
        number = next((p.port for p in s.ports if p.name == port.name and p.protocol == port.protocol), None)
        if number is None:
            return []
        chosen = {ep.address: ep for ep in s.endpoints}
        if len(chosen) != len(s.endpoints):  # duplicates: choose among the copies
            chosen = {}
            for ep in s.endpoints:
                if ep.address not in chosen or _replaces(ep):
                    chosen[ep.address] = ep
        return [_new(Target, (a, number, chosen[a])) for a in sorted(chosen)]
    found: dict[tuple[str, int], Target] = {}
    origin: dict[tuple[str, int], int] = {}  # the slice each chosen copy came from
    for i, s in enumerate(slices):
        number = next((p.port for p in s.ports if p.name == port.name and p.protocol == port.protocol), None)
        if number is None:
            continue
        for ep in s.endpoints:
            k = (ep.address, number)
            prev = found.get(k)
            if prev is None or (_replaces(ep) if origin[k] == i else _wins(ep, prev.endpoint, node)):
                found[k] = _new(Target, (ep.address, number, ep))
                origin[k] = i
    return [found[k] for k in sorted(found)]


def topology_mode(ready: list[Target], node: str | None, zone: str | None) -> str:
    """ "node", "zone" or "" (no filtering), from the ready endpoints' hints, as kube-proxy.

    Hints are used only when every ready endpoint has them and at least one is for us; otherwise
    they are ignored (all endpoints), so traffic never blackholes on missing or unusable hints.
    The Service's ``trafficDistribution`` and ``topology-mode`` annotation are not consulted:
    kube-proxy v1.34 (pkg/proxy/topology.go) decides from the hints alone, the EndpointSlice
    controller having written them for those settings (tests/conformance ``topo-*`` cases).
    """
    eps = [t.endpoint for t in ready]
    if all(e.hint_nodes for e in eps) and any(node in (e.hint_nodes or ()) for e in eps):
        return "node"
    if all(e.hint_zones for e in eps) and zone and any(zone in (e.hint_zones or ()) for e in eps):
        return "zone"
    return ""


def _available(e: Endpoint, mode: str, node: str | None, zone: str | None) -> bool:
    if mode == "node":
        return node in (e.hint_nodes or ())
    if mode == "zone":
        return zone in (e.hint_zones or ())
    return True


def categorize(all_targets: list[Target], node: str | None, zone: str | None) -> Categorized:
    ready = [t for t in all_targets if t.endpoint.ready]
    if ready:
        e = ready[0].endpoint  # hints count only when every ready endpoint has them
        mode = topology_mode(ready, node, zone) if e.hint_nodes or e.hint_zones else ""
        cluster = [t for t in ready if _available(t.endpoint, mode, node, zone)] if mode else ready
    else:  # none ready anywhere: the serving terminating ones
        cluster = [t for t in all_targets if t.endpoint.serving and t.endpoint.terminating]
    local: list[Target] = []
    if node is not None:
        mine = [t for t in all_targets if t.endpoint.node_name == node]
        if mine:
            local = [t for t in mine if t.endpoint.ready] or [
                t for t in mine if t.endpoint.serving and t.endpoint.terminating
            ]
    # usable anywhere: a ready endpoint, or (none ready) a serving terminating one
    return Categorized(cluster, local, bool(ready) or bool(cluster))
