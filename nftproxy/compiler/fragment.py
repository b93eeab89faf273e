"""One Service's share of a table: its map elements and the per-count objects it needs.

A fragment depends only on the Service, its EndpointSlices and the config, so the syncer can
recompute one Service alone and send just the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.endpoints import cluster_endpoints, targets
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.objects import Element, Family, Key

REJECT = ("goto reject-chain",)


@dataclass(frozen=True)
class Fragment:
    key: str  # "namespace/name"
    elements: tuple[tuple[str, Element], ...]  # (set name, element)
    claims: tuple[Key, ...]  # Service IP . proto . port and proto . NodePort keys it owns
    lb_counts: frozenset[int]  # endpoint counts N needing endpoints-N / load-balance-N …
    nodeport_counts: frozenset[int]  # … and nodeport-endpoints-N / nodeport-N
    endpoints: frozenset[tuple[str, int]]  # endpoint address:port pairs in use


def compile_fragment(
    svc: Service, slices: Sequence[EndpointSlice], family: Family, config: ProxyConfig
) -> Fragment | None:
    """The elements Service ``svc`` contributes to ``family``'s table (None: not in this family)."""
    version = family.version
    cluster_ips = [ip for ip in svc.cluster_ips if ip.version == version]
    if not cluster_ips:
        return None
    cluster_ip = str(cluster_ips[0])
    atype = "IPv4" if version == 4 else "IPv6"
    mine = [s for s in slices if s.address_type == atype]
    externals = [str(ip) for ip in dict.fromkeys((*svc.external_ips, *svc.load_balancer_ips)) if ip.version == version]
    frontends = [(cluster_ip, "cluster")] + [(ip, "external") for ip in externals if ip != cluster_ip]

    out: list[tuple[str, Element]] = [("cluster-ips", Element((cluster_ip,)))]
    claims: list[Key] = []
    lb: set[int] = set()
    nodeport: set[int] = set()
    used: set[tuple[str, int]] = set()
    for port in svc.ports:
        proto = port.protocol.lower()
        comment = f"{svc.key}:{port.name}" if port.name else svc.key
        keys = [(ip, proto, str(port.port)) for ip, _ in frontends]
        np_key = (proto, str(port.node_port)) if port.node_port else None
        claims += keys
        if np_key:
            claims.append(np_key)
        usable = cluster_endpoints(targets(port, mine))
        if not usable:
            out += [("no-endpoint-services", Element(k, REJECT, comment)) for k in keys]
            if np_key:
                out.append(("no-endpoint-nodeports", Element(np_key, REJECT, comment)))
            continue
        n = len(usable)
        values = [(t.address, str(t.port)) for t in usable]
        lb.add(n)
        for k, (_, kind) in zip(keys, frontends, strict=True):
            out.append(("service-ips", Element(k, (f"goto {kind}-{n}",), comment)))
            out += [(f"endpoints-{n}", Element((*k, str(slot)), v)) for slot, v in enumerate(values)]
        if np_key:
            nodeport.add(n)
            out.append(("service-nodeports", Element(np_key, (f"goto nodeport-{n}",), comment)))
            out += [(f"nodeport-endpoints-{n}", Element((*np_key, str(slot)), v)) for slot, v in enumerate(values)]
        for t in usable:
            used.add((t.address, t.port))
            # Hairpin (a pod reaching itself) only happens for endpoints on this node.
            if t.endpoint.node_name in (None, config.node_name) or config.node_name is None:
                out.append(("hairpin-endpoints", Element((t.address, t.address))))
    return Fragment(svc.key, tuple(out), tuple(claims), frozenset(lb), frozenset(nodeport), frozenset(used))
