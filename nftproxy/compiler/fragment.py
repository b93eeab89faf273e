"""One Service's share of a table: its map elements and the per-count objects it needs.

A fragment depends only on the Service, its EndpointSlices and the config, so the syncer can
recompute one Service alone and send just the difference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from ipaddress import collapse_addresses
from typing import NamedTuple

from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.endpoints import Target, categorize, targets
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.objects import Element, Family, Key

REJECT = ("goto reject-chain",)
DROP = ("drop",)


Slot = tuple[str, str]  # endpoint address, port (an endpoint map's value)
# (map name, frontend key, value of slot 0, 1, …): the N elements ``key . i : value[i]`` of an
# endpoint map, kept as one entry (an endpoint map holds ~80% of a table's elements).
Spread = tuple[str, Key, tuple[Slot, ...]]


class Fragment(NamedTuple):
    """Immutable; a NamedTuple rather than a frozen dataclass: 10^4 are built per full compile,
    and a frozen dataclass's __init__ sets each field through object.__setattr__."""

    key: str  # "namespace/name"
    elements: tuple[tuple[str, Element], ...]  # (set name, element)
    spreads: tuple[Spread, ...]  # endpoint map entries, keyed by a frontend the Service claims
    claims: tuple[Key, ...]  # Service IP . proto . port and proto . NodePort keys it owns
    objects: frozenset[tuple[str, int]]  # (kind, N) per-count maps/chains it needs
    endpoints: frozenset[tuple[str, int]]  # endpoint address:port pairs in use
    local_endpoints: frozenset[str] = frozenset()  # this node's READY endpoint addresses (health check)
    health_check_port: int | None = None  # healthCheckNodePort (LoadBalancer, eTP Local)


_new = tuple.__new__
COMMENT_MAX = 127  # nft refuses comments over 128 characters (a whole transaction fails)


def _short(text: str) -> str:
    """A comment nft accepts; long names keep their start and end (namespace … :port)."""
    if len(text) <= COMMENT_MAX:
        return text
    return text[:60] + "..." + text[-(COMMENT_MAX - 63) :]


_SLOTS: list[str] = []


def slot_names(n: int) -> list[str]:
    """Slot numbers as text ("0", "1", …), shared by every element, grown on demand."""
    while len(_SLOTS) < n:
        _SLOTS.append(str(len(_SLOTS)))
    return _SLOTS


def spread_elements(key: Key, values: tuple[Slot, ...]) -> Iterator[Element]:
    """The map elements one spread stands for."""
    slots = slot_names(len(values))
    for i, value in enumerate(values):
        yield Element((*key, slots[i]), value)


class _PortText(dict[int, str]):
    def __missing__(self, port: int) -> str:
        text = self[port] = str(port)
        return text


_PORTS = _PortText()  # port number -> its text, shared by every element


class _Out:
    def __init__(self) -> None:
        self.elements: list[tuple[str, Element]] = []
        self.spreads: list[Spread] = []
        self.objects: set[tuple[str, int]] = set()
        self._values: tuple[list[Target], tuple[Slot, ...]] | None = None  # the last list's values

    def add(self, set_name: str, key: Key, value: tuple[str, ...] | None = None, comment: str | None = None) -> None:
        self.elements.append((set_name, _new(Element, (key, value, comment))))  # NamedTuple.__new__ is Python

    def spread(self, kind: str, map_name: str, key: Key, chosen: list[Target]) -> None:
        """Slot i of ``key`` in map ``map_name-N`` -> the i-th endpoint; needs object (kind, N)."""
        n = len(chosen)
        self.objects.add((kind, n))
        last = self._values
        if last is not None and last[0] is chosen:  # ClusterIP, NodePort, external IPs: same list
            values = last[1]
        else:
            ports = _PORTS
            values = tuple([(t.address, ports[t.port]) for t in chosen])
            self._values = (chosen, values)
        self.spreads.append((f"{map_name}-{n}", key, values))


@dataclass(frozen=True, slots=True)
class _Names:
    """The map, chain and object names of one kind of external frontend (IP or NodePort)."""

    dispatch: str  # the verdict map finding the frontend
    cluster_chain: str  # eTP Cluster: masquerade, then all endpoints
    local_chain: str  # eTP Local: short-circuits, then this node's endpoints
    short_circuit: str  # eTP Local: where pod/node traffic goes (all endpoints, no policy)
    balance_chain: str
    kind: str
    endpoints: str
    local_kind: str
    local_endpoints: str


EXTERNAL_IP = _Names(
    "service-ips", "external", "external-local", "local-policy-short-circuit", "load-balance",
    "lb", "endpoints", "local", "local-endpoints",
)  # fmt: skip
NODEPORT = _Names(
    "service-nodeports", "nodeport", "nodeport-local", "nodeport-short-circuit", "nodeport-load-balance",
    "nodeport", "nodeport-endpoints", "nodeport-local", "nodeport-local-endpoints",
)  # fmt: skip


def _external(
    out: _Out, n: _Names, key: Key, comment: str, cluster: list[Target], local: list[Target], etp_local: bool
) -> None:
    """One external frontend (externalIP / LoadBalancer IP . port, or proto . NodePort)."""
    if not etp_local:
        out.add(n.dispatch, key, (f"goto {n.cluster_chain}-{len(cluster)}",), comment)
        out.spread(n.kind, n.endpoints, key, cluster)
        return
    out.add(n.dispatch, key, (f"goto {n.local_chain}-{len(local)}",), comment)
    out.objects.add((n.local_kind, len(local)))  # N = 0 too: that chain drops
    if local:
        out.spread(n.local_kind, n.local_endpoints, key, local)
    out.add(n.short_circuit, key, (f"goto {n.balance_chain}-{len(cluster)}",), comment)
    out.spread(n.kind, n.endpoints, key, cluster)


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
    lb_ips: list[str] = []
    externals: list[str] = []
    if svc.external_ips or svc.load_balancer_ips:
        lb_ips = [str(ip) for ip in svc.load_balancer_ips if ip.version == version]
        externals = [
            str(ip) for ip in dict.fromkeys((*svc.external_ips, *svc.load_balancer_ips)) if ip.version == version
        ]
        externals = [ip for ip in externals if ip != cluster_ip]
    ranges = (
        [
            str(r.network_address) if r.prefixlen == r.max_prefixlen else str(r)
            for r in collapse_addresses([r for r in svc.load_balancer_source_ranges if r.version == version])  # type: ignore[type-var]
        ]
        if svc.load_balancer_source_ranges
        else []
    )
    itp_local = svc.internal_traffic_policy == "Local"
    etp_local = svc.external_traffic_policy == "Local" and (bool(externals) or svc.type != "ClusterIP")

    out = _Out()
    out.add("cluster-ips", (cluster_ip,))
    claims: list[Key] = []
    used: set[tuple[str, int]] = set()
    local_addrs: set[str] = set()
    for port in svc.ports:
        proto = port.protocol.lower()
        comment = _short(f"{svc.key}:{port.name}" if port.name else svc.key)
        ckey = (cluster_ip, proto, str(port.port))
        ekeys = [(ip, proto, str(port.port)) for ip in externals]
        np_key = (proto, str(port.node_port)) if port.node_port else None
        claims += [ckey, *ekeys, *([np_key] if np_key else [])]
        cat = categorize(targets(port, mine, config.node_name), config.node_name, config.node_zone)
        if not cat.any_usable:
            for k in (ckey, *ekeys):
                out.add("no-endpoint-services", k, REJECT, comment)
            if np_key:
                out.add("no-endpoint-nodeports", np_key, REJECT, comment)
            continue
        cluster, local = cat.cluster, cat.local
        nc, nl = len(cluster), len(local)

        # ClusterIP: internalTrafficPolicy
        if not itp_local:
            out.add("service-ips", ckey, (f"goto cluster-{nc}",), comment)
            out.spread("lb", "endpoints", ckey, cluster)
        elif local:
            out.add("service-ips", ckey, (f"goto cluster-local-{nl}",), comment)
            out.spread("local", "local-endpoints", ckey, local)
        else:
            out.add("no-endpoint-services", ckey, DROP, comment)  # endpoints exist, none here

        # externalIPs, LoadBalancer IPs and the NodePort: externalTrafficPolicy
        for k in ekeys:
            _external(out, EXTERNAL_IP, k, comment, cluster, local, etp_local)
        if np_key:
            _external(out, NODEPORT, np_key, comment, cluster, local, etp_local)

        # sessionAffinity ClientIP: record which endpoint each client got, for the Service's timeout
        if svc.session_affinity_timeout:
            record = (f"goto affinity-record-{svc.session_affinity_timeout}",)
            out.objects.add(("affinity", svc.session_affinity_timeout))
            for k in (ckey, *ekeys):
                out.add("affinity-services", k, record, comment)
            if np_key:
                out.add("affinity-nodeports", np_key, record, comment)

        # loadBalancerSourceRanges: only listed sources reach the LoadBalancer IPs (not NodePorts)
        if ranges:
            for ip in lb_ips:
                k = (ip, proto, str(port.port))
                out.add("firewall-ips", k)
                for r in ranges:
                    out.add("firewall-allow", (*k, r))

        both = cluster + local if local else cluster
        used.update([(t.address, t.port) for t in both])
        # Hairpin (a pod reaching itself) only happens for endpoints on this node.
        node = config.node_name
        for a in [t.address for t in both if node is None or t.endpoint.node_name in (None, node)]:
            out.add("hairpin-endpoints", (a, a))
        if local:  # the health check counts ready ones only (not the terminating fallback)
            local_addrs.update([t.address for t in local if t.endpoint.ready])
    return _new(
        Fragment,
        (
            svc.key,
            tuple(out.elements),
            tuple(out.spreads),
            tuple(claims),
            frozenset(out.objects),
            frozenset(used),
            frozenset(local_addrs),
            svc.health_check_node_port if svc.type == "LoadBalancer" and etp_local else None,
        ),
    )
