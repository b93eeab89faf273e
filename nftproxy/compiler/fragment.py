"""One Service's share of a table: its map elements and the per-count objects it needs.

A fragment depends only on the Service, its EndpointSlices and the config, so the syncer can
recompute one Service alone and send just the difference. ``compile_fragment`` reads as the
steps kube-proxy takes per Service port: source ranges; no endpoints → reject; the ClusterIP
under internalTrafficPolicy; external IPs and the NodePort under externalTrafficPolicy;
affinity; hairpin.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from ipaddress import collapse_addresses, ip_network
from typing import Any, NamedTuple

from nftproxy.compiler import balancing, counters, maglev, names
from nftproxy.compiler.balancing import name as tagged
from nftproxy.compiler.balancing import with_tag
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.endpoints import Categorized, Target, categorize, targets
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.model.balancing import DEFAULT_TABLE_SIZE
from nftproxy.model.types import EndpointSlice, IPAddress, IPNetwork, Service, ServicePort
from nftproxy.nft.objects import Element, Family, Key, Slot, address, prefix

REJECT = ("goto reject-chain",)
DROP = ("drop",)


MapSpread = tuple[str, Key, tuple[Slot, ...]]  # (endpoint map name, *Spread)
Lists = tuple[tuple[Slot, ...], tuple[Slot, ...]]  # a port's endpoints for Cluster and for Local policies


class Fragment(NamedTuple):
    """Immutable; a NamedTuple rather than a frozen dataclass: 10^4 are built per full compile,
    and a frozen dataclass's __init__ sets each field through object.__setattr__."""

    key: str  # "namespace/name"
    elements: tuple[tuple[str, Element], ...]  # (set name, element)
    spreads: tuple[MapSpread, ...]  # endpoint map entries, keyed by a frontend the Service claims
    claims: tuple[Key, ...]  # Service IP . proto . port and proto . NodePort keys it wants (claims.py)
    objects: frozenset[tuple[str, int]]  # (kind, N) per-count maps/chains it needs
    endpoints: tuple[Slot, ...]  # the distinct endpoints in use (address, port): the slots' own tuples
    local_endpoints: frozenset[str] = frozenset()  # this node's READY endpoint addresses (health check)
    health_check_port: int | None = None  # healthCheckNodePort (LoadBalancer, eTP Local)
    # UDP frontends -> IPs of their serving endpoints: conntrack entries of a frontend DNATed to
    # any other address are stale (kube-proxy's CleanStaleEntries; none serving: left alone).
    udp_serving: tuple[tuple[Key, frozenset[str]], ...] = ()
    # reported like skips, the Service is programmed (a bad annotation, externalIP, source range,
    # load balancer IP, or an endpoint left out of one of its slices)
    warnings: tuple[str, ...] = ()
    # ClientIP affinity records (map names) -> the endpoints a record of it may hold (stale.py)
    affinity: tuple[tuple[str, frozenset[Slot]], ...] = ()
    # per Service port with usable endpoints but none here under a Local policy: "internal" /
    # "external" (kube-proxy's sync_proxy_rules_no_local_endpoints_total)
    no_local: tuple[str, ...] = ()
    # TCP NodePorts the userspace proxy serves on loopback (--nodeport-addresses localhost)
    localhost: tuple[LocalhostNodePort, ...] = ()
    # of the claims, the externalIP and LoadBalancer IP ones: they yield to another Service's own
    # ClusterIP or NodePort on the same key (claims.py)
    shared: frozenset[Key] = frozenset()
    created: str = ""  # the Service's creationTimestamp: the older claim wins a contested frontend


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


# What every Service of a shape shares, made once (docs/performance.md, "A fragment shares what
# Services of its shape share"): a fragment is mostly references to these, not objects of its own. 10^5 Services
# built a "goto cluster-10" string, a value tuple and a per-count name each; and the frozensets
# of a fragment, mostly empty or alike. The keys are the per-count objects of the shared
# algorithms (random, source-hash: their tag is "" or "sh"), so the caches stay small; a
# round-robin port's own chains (balancing.py) do not go through them.
_CACHE_MAX = 4096  # entries; cleared past it (only the sharing is lost)
_GOTO: dict[tuple[str, str, int], tuple[str]] = {}
_SPREAD: dict[tuple[str, str, str, int], tuple[tuple[str, int], str]] = {}
_SETS: dict[frozenset[tuple[str, int]], frozenset[tuple[str, int]]] = {}
_EMPTY: frozenset[Any] = frozenset()


def _goto(base: str, t: str, n: int) -> tuple[str]:
    """``("goto <base>[-t]-N",)``, one tuple per chain."""
    k = (base, t, n)
    v = _GOTO.get(k)
    if v is None:
        if len(_GOTO) >= _CACHE_MAX:
            _GOTO.clear()
        v = _GOTO[k] = (f"goto {tagged(base, t, n)}",)
    return v


def _spread_names(kind: str, map_name: str, t: str, n: int) -> tuple[tuple[str, int], str]:
    """The per-count object an endpoint map of N slots belongs to, and the map's name."""
    k = (kind, map_name, t, n)
    v = _SPREAD.get(k)
    if v is None:
        if len(_SPREAD) >= _CACHE_MAX:
            _SPREAD.clear()
        v = _SPREAD[k] = ((with_tag(kind, t), n), tagged(map_name, t, n))
    return v


def _objects(objs: set[tuple[str, int]]) -> frozenset[tuple[str, int]]:
    """A fragment's per-count objects, one frozenset per distinct set of them."""
    key = frozenset(objs)
    v = _SETS.get(key)
    if v is None:
        if len(_SETS) >= _CACHE_MAX:
            _SETS.clear()
        v = _SETS[key] = key
    return v


def _frozen(items: set[Any]) -> frozenset[Any]:
    """An empty set as THE empty frozenset (each ``frozenset()`` of an empty set is 216 bytes)."""
    return frozenset(items) if items else _EMPTY


def _distinct(lists: list[tuple[Slot, ...]]) -> tuple[Slot, ...]:
    """The endpoints of a Service's ports, each once; one port: its own list (already distinct)."""
    if len(lists) == 1:
        return lists[0]
    return tuple(dict.fromkeys(slot for slots in lists for slot in slots))


def slot_values(chosen: Sequence[Target]) -> tuple[Slot, ...]:
    """An endpoint list as the values of its N slots."""
    ports = _PORTS
    return tuple([(t.address, ports[t.port]) for t in chosen])


class _Out:
    """What compiling one Service produces, step by step."""

    def __init__(self) -> None:
        self.elements: list[tuple[str, Element]] = []
        self.spreads: list[MapSpread] = []
        self.objects: set[tuple[str, int]] = set()
        self.claims: list[Key] = []
        self.shared: set[Key] = set()
        self.used: list[tuple[Slot, ...]] = []  # per port: its endpoint lists (slot tuples)
        self.local: set[str] = set()
        self.udp_serving: list[tuple[Key, frozenset[str]]] = []
        self.affinity: list[tuple[str, frozenset[Slot]]] = []
        self.no_local: list[str] = []
        self.localhost: list[LocalhostNodePort] = []
        self.tag = ""  # the load-balancing algorithm's name infix for this port (balancing.py)

    def add(self, set_name: str, key: Key, value: tuple[str, ...] | None = None, comment: str | None = None) -> None:
        self.elements.append((set_name, Element(key, value, comment)))

    def spread(self, kind: str, map_name: str, key: Key, values: tuple[Slot, ...]) -> None:
        """Slot i of ``key`` in map ``map_name-N`` -> the i-th endpoint; needs object (kind, N)."""
        n = len(values)
        obj, name = _spread_names(kind, map_name, self.tag if n > 1 else "", n)
        self.objects.add(obj)
        self.spreads.append((name, key, values))

    def goto(self, base: str, n: int) -> tuple[str]:
        """``goto`` a per-count chain of this port's algorithm (N <= 1: the plain one, nothing to
        choose), as a map element's value."""
        return _goto(base, self.tag if n > 1 else "", n)


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
    names.SERVICE_IPS, "external", "external-local", names.LOCAL_POLICY_SHORT_CIRCUIT, "load-balance",
    "lb", names.ENDPOINTS, "local", names.LOCAL_ENDPOINTS,
)  # fmt: skip
NODEPORT = _Names(
    names.SERVICE_NODEPORTS, "nodeport", "nodeport-local", names.NODEPORT_SHORT_CIRCUIT, "nodeport-load-balance",
    "nodeport", names.NODEPORT_ENDPOINTS, "nodeport-local", names.NODEPORT_LOCAL_ENDPOINTS,
)  # fmt: skip


class _Frontends(NamedTuple):
    """A Service's addresses in one family, and the policies that apply to them."""

    cluster_ip: str
    externals: tuple[str, ...]  # externalIPs and LoadBalancer IPs (not the ClusterIP)
    lb_ips: tuple[str, ...]  # LoadBalancer IPs (source ranges apply to these)
    ranges: tuple[str, ...]  # the sources loadBalancerSourceRanges let in (see _allowed_sources)
    itp_local: bool
    etp_local: bool


class _Port(NamedTuple):
    """One Service port's frontend keys, and the endpoints chosen for it."""

    cluster: Key  # ClusterIP . proto . port
    externals: tuple[Key, ...]  # external/LB IP . proto . port
    node_port: Key | None  # proto . NodePort
    comment: str
    proto: str
    port: str


def _allowed_sources(svc: Service, version: int, node_ip: IPAddress) -> tuple[str, ...]:
    """The sources a Service's loadBalancerSourceRanges let reach its LoadBalancer IPs, in one
    family: its ranges of that family and, when one of them holds the node's IP, the
    LoadBalancer IPs themselves, as kube-proxy's allowFromNode: a node that holds a VIP on an
    interface (kube-vip, a VIP-style load balancer) connects to it from the VIP. Collapsed, so
    that no two elements overlap (the kernel refuses overlapping intervals)."""
    mine: list[IPNetwork] = [r for r in svc.load_balancer_source_ranges if r.version == version]
    if any(node_ip in r for r in mine):
        mine += [ip_network(ip) for ip in svc.load_balancer_ips if ip.version == version]
    return tuple(prefix(r) for r in collapse_addresses(mine))  # type: ignore[type-var]


def _frontends(svc: Service, version: int, config: ProxyConfig) -> _Frontends | None:
    ips = svc.cluster_ips
    cluster_ip: IPAddress | None = ips[0] if ips and ips[0].version == version else None  # primary family
    if cluster_ip is None:
        cluster_ip = next((ip for ip in ips if ip.version == version), None)
        if cluster_ip is None:
            return None
    text = str(cluster_ip)
    lb_ips: tuple[str, ...] = ()
    externals: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()
    if svc.external_ips or svc.load_balancer_ips:  # most Services have neither
        lb_ips = tuple(address(ip) for ip in svc.load_balancer_ips if ip.version == version)
        both = dict.fromkeys((*svc.external_ips, *svc.load_balancer_ips))
        externals = tuple(s for s in (address(ip) for ip in both if ip.version == version) if s != text)
    if svc.load_balancer_source_ranges:
        ranges = _allowed_sources(svc, version, config.node_ip(version))
    return _Frontends(
        text,
        externals,
        lb_ips,
        ranges,
        svc.internal_traffic_policy == "Local",
        svc.external_traffic_policy == "Local" and (bool(externals) or svc.type != "ClusterIP"),
    )


def _port_keys(key: str, fe: _Frontends, port: ServicePort) -> _Port:
    proto = port.protocol.lower()
    number = _PORTS[port.port]
    return _Port(
        (fe.cluster_ip, proto, number),
        tuple((ip, proto, number) for ip in fe.externals),
        (proto, _PORTS[port.node_port]) if port.node_port else None,
        _short(f"{key}:{port.name}" if port.name else key),
        proto,
        number,
    )


def _no_endpoints(out: _Out, p: _Port) -> None:
    """No usable endpoint anywhere: every frontend of the port rejects (connection refused)."""
    for k in (p.cluster, *p.externals):
        out.add(names.NO_ENDPOINT_SERVICES, k, REJECT, p.comment)
    if p.node_port:
        out.add(names.NO_ENDPOINT_NODEPORTS, p.node_port, REJECT, p.comment)


def _cluster_ip(out: _Out, p: _Port, fe: _Frontends, cluster: tuple[Slot, ...], local: tuple[Slot, ...]) -> None:
    """The ClusterIP under internalTrafficPolicy (Local with none here: dropped)."""
    if not fe.itp_local:
        out.add(names.SERVICE_IPS, p.cluster, out.goto("cluster", len(cluster)), p.comment)
        out.spread("lb", names.ENDPOINTS, p.cluster, cluster)
    elif local:
        out.add(names.SERVICE_IPS, p.cluster, out.goto("cluster-local", len(local)), p.comment)
        out.spread("local", names.LOCAL_ENDPOINTS, p.cluster, local)
    else:
        out.add(names.NO_ENDPOINT_SERVICES, p.cluster, DROP, p.comment)  # endpoints exist, none here


def _external(
    out: _Out, n: _Names, key: Key, comment: str, cluster: tuple[Slot, ...], local: tuple[Slot, ...], etp_local: bool
) -> None:
    """One external frontend (externalIP / LoadBalancer IP . port, or proto . NodePort) under
    externalTrafficPolicy: Cluster masquerades to all endpoints; Local keeps the source and uses
    this node's endpoints (none: dropped), except for pod and node traffic (short-circuit)."""
    if not etp_local:
        out.add(n.dispatch, key, out.goto(n.cluster_chain, len(cluster)), comment)
        out.spread(n.kind, n.endpoints, key, cluster)
        return
    out.add(n.dispatch, key, out.goto(n.local_chain, len(local)), comment)
    if local:
        out.spread(n.local_kind, n.local_endpoints, key, local)
    else:
        out.objects.add((n.local_kind, 0))  # that chain drops
    out.add(n.short_circuit, key, out.goto(n.balance_chain, len(cluster)), comment)
    out.spread(n.kind, n.endpoints, key, cluster)


def _round_robin(
    out: _Out, p: _Port, fe: _Frontends, cluster: tuple[Slot, ...], local: tuple[Slot, ...], t: str
) -> None:
    """round-robin (balancing.py): this port's own chain and map per endpoint list (all, and
    this node's for Local policies), reached through the shared entry chains."""
    out.objects.add((balancing.RR_ENTRY, 0))

    def chain(tag: str, values: tuple[Slot, ...]) -> str:
        n = len(values)
        out.objects.add((balancing.rr_kind(tag), n))
        out.spreads.append((balancing.rr_name(tag, n), (), values))
        return f"goto {balancing.rr_name(tag, n)}"

    to_all = chain(t, cluster)
    to_local = chain(balancing.local_tag(t), local) if local and (fe.itp_local or fe.etp_local) else None
    if not fe.itp_local:
        out.add(names.SERVICE_IPS, p.cluster, ("goto cluster-rr",), p.comment)
        out.add(balancing.RR_SERVICES, p.cluster, (to_all,), p.comment)
    elif to_local:
        out.add(names.SERVICE_IPS, p.cluster, ("goto cluster-rr",), p.comment)
        out.add(balancing.RR_SERVICES, p.cluster, (to_local,), p.comment)
    else:
        out.add(names.NO_ENDPOINT_SERVICES, p.cluster, DROP, p.comment)  # endpoints exist, none here
    fronts = [
        (names.SERVICE_IPS, k, balancing.RR_SERVICES, balancing.RR_LOCAL_SERVICES, "external") for k in p.externals
    ]
    if p.node_port:
        fronts.append(
            (names.SERVICE_NODEPORTS, p.node_port, balancing.RR_NODEPORTS, balancing.RR_LOCAL_NODEPORTS, "nodeport")
        )
    for dispatch, key, all_map, local_map, entry in fronts:
        out.add(dispatch, key, (f"goto {entry}-local-rr" if fe.etp_local else f"goto {entry}-rr",), p.comment)
        out.add(all_map, key, (to_all,), p.comment)
        if fe.etp_local and to_local:
            out.add(local_map, key, (to_local,), p.comment)


def _affinity(
    out: _Out, p: _Port, fe: _Frontends, svc: str, port: str, timeout: int, lists: tuple[tuple[Slot, ...], ...]
) -> None:
    """sessionAffinity ClientIP: one record per client for the Service port, as kube-proxy's
    per-endpoint sets: a client keeps its endpoint across the ClusterIP, NodePort, externalIPs and
    LoadBalancer IPs. Frontends under a Local policy choose among this node's endpoints, so they
    share a record of their own (tag + "l"); pod and node traffic short-circuited there uses it too."""
    cluster, local = lists
    tag = names.port_tag(svc, port, p.proto)
    uses = [(p.cluster, fe.itp_local, names.AFFINITY_SERVICES, names.STICKY_SERVICES)]
    uses += [(k, fe.etp_local, names.AFFINITY_SERVICES, names.STICKY_SERVICES) for k in p.externals]
    if p.node_port:
        uses.append((p.node_port, fe.etp_local, names.AFFINITY_NODEPORTS, names.STICKY_NODEPORTS))
    seen = set()
    for key, is_local, record_map, sticky_map in uses:
        t = tag + "l" if is_local else tag
        if t not in seen:
            seen.add(t)
            out.objects.add((f"{names.AFFINITY_KIND}:{t}", timeout))
            allowed = frozenset(cluster + local) if is_local else frozenset(cluster)
            out.affinity.append((names.affinity_map(t, timeout), allowed))
        out.add(record_map, key, (f"goto {names.affinity_record_chain(t, timeout)}",), p.comment)
        out.add(sticky_map, key, (f"jump {names.sticky_chain(t, timeout)}",), p.comment)


def _source_ranges(out: _Out, p: _Port, fe: _Frontends) -> None:
    """loadBalancerSourceRanges: only listed sources reach the LoadBalancer IPs (not NodePorts),
    whether the port has endpoints or not (as kube-proxy: another source is dropped, not told
    that the port has no endpoints). Checked on new connections only (skeleton.py)."""
    for ip in fe.lb_ips:
        k = (ip, p.proto, p.port)
        out.add(names.FIREWALL_IPS, k)
        for r in fe.ranges:
            out.add(names.FIREWALL_ALLOW, (*k, r))


def _hairpin(out: _Out, cat: Categorized, slots: Lists, node: str | None, proto: str) -> None:
    """A pod reaching itself through the Service is masqueraded: only endpoints whose slice says
    this node (kube-proxy v1.36+, its hairpin-connections set); all of them if we have no name."""
    out.used += [s for s in slots if s]
    both = cat.cluster + cat.local if cat.local else cat.cluster
    ports = _PORTS
    for t in both:
        if node is None or t.endpoint.node_name == node:  # keyed by port too, as kube-proxy's set
            out.add(names.HAIRPIN_ENDPOINTS, (t.address, t.address, proto, ports[t.port]))
    out.local.update([t.address for t in cat.local if t.endpoint.ready])  # health check: ready ones only


def _plain(port: ServicePort, mine: list[EndpointSlice], node: str | None) -> Lists | None:
    """The common case's endpoint lists in one pass, or None for the general path (targets,
    categorize): one slice, every endpoint ready, no address twice, no topology hint. Then every
    endpoint serves traffic under a Cluster policy (sorted by address, as ``targets``), and this
    node's endpoints under a Local one (none when the proxy has no node name); both as slots
    (docs/performance.md, "The common port's endpoints in one pass")."""
    if len(mine) != 1:
        return None
    s = mine[0]
    number = next((p.port for p in s.ports if p.name == port.name and p.protocol == port.protocol), None)
    eps = s.endpoints
    if number is None or not eps:
        return None
    for ep in eps:
        if not ep.ready or ep.hint_nodes or ep.hint_zones:
            return None
    by_address = {ep.address: ep for ep in eps}
    if len(by_address) != len(eps):
        return None
    text = _PORTS[number]
    cluster = tuple([(a, text) for a in sorted(by_address)])
    if node is None:
        return cluster, ()
    return cluster, tuple([slot for slot in cluster if by_address[slot[0]].node_name == node])


def _plain_hairpin(out: _Out, cluster: tuple[Slot, ...], local: tuple[Slot, ...], node: str | None,
                   proto: str) -> None:  # fmt: skip
    """``_hairpin`` of a ``_plain`` port: this node's endpoints are ``local`` (a subset of
    ``cluster``), all of them without a node name; every one is ready."""
    out.used.append(cluster)
    for ip, port in cluster if node is None else local:
        out.add(names.HAIRPIN_ENDPOINTS, (ip, ip, proto, port))
    if local:
        out.local.update([ip for ip, _ in local])


def _served(found: list[Target]) -> frozenset[str]:
    """Each endpoint as its address and as ``address|port``: a flow is judged by its endpoint's
    address and port (a Service whose targetPort changed leaves its flows to the old port stale,
    as kube-proxy; upstream e2e "Conntrack should be able to cleanup conntrack entries when UDP
    service target port changes for a NodePort service")."""
    return frozenset([t.address for t in found] + [f"{t.address}|{t.port}" for t in found])


def _udp_serving(out: _Out, p: _Port, found: list[Target], itp_local: bool, etp_local: bool) -> None:
    """Which endpoint IPs still serve this UDP port, for every frontend of it (see Fragment).

    With none serving, the ClusterIP's, externalIPs' and LoadBalancer IPs' flows are all stale
    (kube-proxy v1.37, kubernetes#139629: they were DNATed before the reject rule could see them);
    a NodePort's are left alone, as upstream: they are matched by port number alone.

    Intentionally unlike kube-proxy (case udp-endpoint-terminating; docs/differences.md, docs/e2e.md):
    under a Cluster policy, while the port has a ready endpoint, a terminating one no longer keeps
    its UDP flows. A client that reuses one socket (glibc's resolver, to CoreDNS) is moved to a ready endpoint while the
    terminating one still answers (CoreDNS's lameduck), instead of after it exited: kube-proxy keeps
    the flow until the endpoint is gone, and the lookups sent in between are lost. Under a Local
    policy, where new flows may fall back to this node's terminating endpoints, upstream's rule
    stays (a flushed flow would only be sent to the same endpoint again)."""
    serving = _served([t for t in found if t.endpoint.serving])
    ready = _served([t for t in found if t.endpoint.ready]) or serving
    out.udp_serving.append((p.cluster, serving if itp_local else ready))
    for k in p.externals:
        out.udp_serving.append((k, serving if etp_local else ready))
    if serving and p.node_port:
        out.udp_serving.append((p.node_port, serving if etp_local else ready))


def _localhost(out: _Out, p: _Port, svc: Service, port: str, algorithm: str, cat: Categorized,
               etp_local: bool, rejected: tuple[str, ...]) -> None:  # fmt: skip
    """A NodePort on loopback (gate KubeProxyNFTablesLocalhostNodePorts), which nftables cannot
    DNAT: a protocol in ``rejected`` (UDP and SCTP; TCP too without the userspace proxy) is
    rejected and counted (skeleton.py), whether the port has endpoints or not, as kube-proxy; TCP
    otherwise goes to the userspace proxy, with the endpoints chosen here (none usable: none, no
    listener)."""
    assert p.node_port is not None
    if p.proto in rejected:
        chain = names.localhost_nodeport_reject_chain(p.proto)
        out.add(names.LOCALHOST_NODEPORT_REJECT_PORTS, p.node_port, (f"goto {chain}",), p.comment)
    elif p.proto == "tcp":
        cluster, local = (slot_values(cat.cluster), slot_values(cat.local)) if cat.any_usable else ((), ())
        affinity = svc.session_affinity_timeout or 0
        size = (svc.maglev_table_size or DEFAULT_TABLE_SIZE) if algorithm == balancing.MAGLEV else 0
        out.localhost.append(
            LocalhostNodePort(int(p.node_port[1]), svc.key, port, algorithm, affinity, etp_local, cluster, local, size)
        )


def compile_fragment(
    svc: Service, slices: Sequence[EndpointSlice], family: Family, config: ProxyConfig
) -> Fragment | None:
    """The elements Service ``svc`` contributes to ``family``'s table (None: not in this family)."""
    version = 4 if family is Family.IP else 6
    fe = _frontends(svc, version, config)
    if fe is None:
        return None
    key = svc.key
    atype = "IPv4" if version == 4 else "IPv6"
    mine = [s for s in slices if s.address_type == atype]
    out = _Out()
    algorithm = svc.load_balancing or config.load_balancing
    rejected = config.localhost_rejected(version) if config.enabled_gates else ()  # empty: the gate is off
    affinity, warnings = svc.session_affinity_timeout, svc.warnings
    if any(s.warnings for s in mine):  # endpoints left out of its slices: reported with the Service
        warnings += tuple(f"EndpointSlice {s.name}: {w}" for s in mine for w in s.warnings)
    out.add(names.CLUSTER_IPS, (fe.cluster_ip,))
    for port in svc.ports:
        p = _port_keys(key, fe, port)
        out.claims += [p.cluster, *p.externals, *([p.node_port] if p.node_port else [])]
        out.shared.update(p.externals)
        if config.service_counters:  # its frontends' counters, with endpoints or without
            out.elements += counters.elements(p.cluster, p.externals, p.node_port, p.comment)
        # UDP (conntrack) and localhost NodePorts read each endpoint's conditions: the general path
        plain = None if p.proto == "udp" or (rejected and p.node_port) else _plain(port, mine, config.node_name)
        if plain is None:
            found = targets(port, mine, config.node_name)
            if p.proto == "udp":
                _udp_serving(out, p, found, fe.itp_local, fe.etp_local)
            cat = categorize(found, config.node_name, config.node_zone)
            if rejected and p.node_port:
                _localhost(out, p, svc, port.name or str(port.port), algorithm, cat, fe.etp_local, rejected)
            if fe.ranges:
                _source_ranges(out, p, fe)
            if not cat.any_usable:
                _no_endpoints(out, p)
                continue
            cluster, local = slot_values(cat.cluster), slot_values(cat.local)
        else:
            cat = None
            cluster, local = plain
            if fe.ranges:
                _source_ranges(out, p, fe)
        if not local and (fe.itp_local or fe.etp_local):
            out.no_local += [p for p, on in (("internal", fe.itp_local), ("external", fe.etp_local)) if on]
        endpoints = (cluster, local)  # each endpoint once (the hairpin set, the endpoint lists used)
        if algorithm == balancing.MAGLEV:  # each list as its table of M slots (maglev.py)
            cluster, local, warning = maglev.lookup_tables(cluster, local, svc.maglev_table_size)
            warnings += (warning,) if warning and warning not in warnings else ()
        t = balancing.tag(algorithm, key, port.name or str(port.port), p.proto, bool(affinity))
        if algorithm == balancing.ROUND_ROBIN and max(len(cluster), len(local)) > 1:
            _round_robin(out, p, fe, cluster, local, t)
        else:
            out.tag = t if algorithm in (balancing.SOURCE_HASH, balancing.MAGLEV) else ""
            _cluster_ip(out, p, fe, cluster, local)
            for k in p.externals:
                _external(out, EXTERNAL_IP, k, p.comment, cluster, local, fe.etp_local)
            if p.node_port:
                _external(out, NODEPORT, p.node_port, p.comment, cluster, local, fe.etp_local)
        if affinity:
            _affinity(out, p, fe, key, port.name or str(port.port), affinity, (cluster, local))
        if cat is None:
            _plain_hairpin(out, *endpoints, config.node_name, p.proto)
        else:
            _hairpin(out, cat, endpoints, config.node_name, p.proto)
    return Fragment(
        key,
        tuple(out.elements),
        tuple(out.spreads),
        tuple(out.claims),
        _objects(out.objects),
        _distinct(out.used) if out.used else (),
        _frozen(out.local),
        svc.health_check_node_port if svc.type == "LoadBalancer" and fe.etp_local else None,
        tuple(out.udp_serving),
        warnings,
        tuple(out.affinity),
        tuple(out.no_local),
        tuple(out.localhost),
        _frozen(out.shared),
        svc.created,
    )
