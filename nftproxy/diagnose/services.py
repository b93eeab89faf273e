"""``nftproxy list``: every Service frontend a node's table programs, one row each.

Read from the table alone (the kernel's, or a compiled one for tests), in one pass over its
elements: the dispatch maps' elements (comment ``namespace/name:port``) are the frontends; the
endpoint maps keyed by a frontend (and round-robin's own maps) its backends; the affinity,
short-circuit and firewall sets its policy. What the table does not hold is not guessed: an
externalIP and a LoadBalancer IP without source ranges look alike (type ``External``), an endpoint's
conditions (ready, serving, terminating) are not in it, and with one endpoint (or none) the
load-balancing algorithm is not either (nothing to choose: no algorithm in the names).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nftproxy.compiler import balancing, names
from nftproxy.diagnose.tableview import TableView
from nftproxy.nft.objects import Element, Key

CLUSTER_IP, NODE_PORT, EXTERNAL, LOAD_BALANCER = "ClusterIP", "NodePort", "External", "LoadBalancer"
ACTIVE, NO_ENDPOINTS, NO_LOCAL_ENDPOINTS = "active", "no-endpoints", "no-local-endpoints"
CLUSTER, LOCAL = "Cluster", "Local"

_LOCAL_BASES = (names.LOCAL_ENDPOINTS, names.NODEPORT_LOCAL_ENDPOINTS)
# a frontend's chain binding one of these is an externalTrafficPolicy Local chain
_LOCAL_POLICY_MAPS = tuple(
    f"@{m}"
    for m in (names.LOCAL_POLICY_SHORT_CIRCUIT, names.NODEPORT_SHORT_CIRCUIT,
              names.RR_LOCAL_SERVICES, names.RR_LOCAL_NODEPORTS)
)  # fmt: skip
_TYPE_ORDER = {CLUSTER_IP: 0, EXTERNAL: 1, LOAD_BALANCER: 1, NODE_PORT: 2}


@dataclass(frozen=True)
class Backend:
    address: str
    port: int
    slots: int = 1  # the map's slots that hold it: its share of new connections is slots/N

    @property
    def label(self) -> str:
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return f"{addr}:{self.port}" + (f" (x{self.slots})" if self.slots > 1 else "")


@dataclass(frozen=True)
class Row:
    """One frontend: a Service IP . port, or a NodePort (``address`` None: it answers on the
    table's NodePort addresses)."""

    service: str  # namespace/name (a name too long for an nft comment: start...end)
    port_name: str  # "" for an unnamed port
    family: str  # ip | ip6
    type: str  # ClusterIP | NodePort | External (externalIP or LoadBalancer IP) | LoadBalancer
    address: str | None
    port: int
    protocol: str  # TCP | UDP | SCTP
    state: str  # active | no-endpoints (rejected) | no-local-endpoints (dropped: Local policy)
    backends: tuple[Backend, ...]  # where new connections go (under a Local policy: this node's)
    # externalTrafficPolicy Local: where connections from pods and from the node itself go instead
    short_circuit_backends: tuple[Backend, ...]
    # a ClusterIP's internalTrafficPolicy, the others' externalTrafficPolicy (None: no endpoints,
    # every frontend rejects whatever the policy)
    traffic_policy: str | None
    session_affinity_timeout: int | None  # sessionAffinity ClientIP's seconds (None: no affinity)
    load_balancing: str | None  # random | round-robin | source-hash | maglev (None: at most one endpoint)
    source_ranges: tuple[str, ...]  # loadBalancerSourceRanges as the firewall holds them

    @property
    def frontend(self) -> str:
        proto = f"{self.port}/{self.protocol}"
        if self.address is None:
            return f"{'0.0.0.0' if self.family == 'ip' else '[::]'}:{proto}"
        return f"[{self.address}]:{proto}" if ":" in self.address else f"{self.address}:{proto}"


@dataclass(frozen=True)
class Listing:
    tables: tuple[str, ...]  # the tables read ("ip nftproxy"); an absent one is not listed
    nodeport_addresses: Mapping[str, tuple[str, ...]]  # family -> the NodePort addresses
    frontends: tuple[Row, ...]


def _backends(slots: Iterable[tuple[str, ...] | None]) -> tuple[Backend, ...]:
    """An endpoint map's values (address, port), one Backend per endpoint, in slot order."""
    counts: Counter[tuple[str, str]] = Counter()
    for value in slots:
        if value is not None and len(value) >= 2:
            counts[(value[0], value[1])] += 1
    return tuple(Backend(a, int(p), n) for (a, p), n in counts.items())


class _Index:
    """One table's elements, indexed by frontend: read once, whatever the number of Services."""

    def __init__(self, view: TableView) -> None:
        self.view = view
        # (local list?, frontend key) -> [(slot, value, endpoint map's tag, its N)]
        self.spreads: dict[tuple[bool, Key], list[tuple[int, tuple[str, ...] | None, str, int]]] = defaultdict(list)
        for set_name, els in view.elements.items():
            em = names.endpoint_map(set_name)
            if em is None:
                continue
            local = em.base in _LOCAL_BASES
            for el in els.values():
                if len(el.key) == em.width + 1 and el.key[-1].isdigit():
                    self.spreads[(local, el.key[: em.width])].append((int(el.key[-1]), el.value, em.tag, em.n))
        self.cluster_ips = {k[0] for k in view.keys(names.CLUSTER_IPS)}
        self.firewall = set(view.keys(names.FIREWALL_IPS))
        self.allowed: dict[Key, list[str]] = defaultdict(list)
        for k in view.keys(names.FIREWALL_ALLOW):
            self.allowed[k[: names.IP_FRONTEND]].append(k[names.IP_FRONTEND])

    def spread(self, local: bool, key: Key) -> tuple[tuple[Backend, ...], str | None]:
        """The endpoints of ``key``'s (local) endpoint map, and the algorithm its name says."""
        entries = sorted(self.spreads.get((local, key), []), key=lambda e: e[0])
        algorithm = None
        if any(n > 1 for _, _, _, n in entries):
            tag = next(t for _, _, t, n in entries if n > 1)
            algorithm = balancing.algorithm_of(tag)
        return _backends(v for _, v, _, _ in entries), algorithm

    def rr(self, set_name: str, key: Key) -> tuple[str | None, tuple[Backend, ...]]:
        """Round-robin: the Service port's own map that ``set_name`` sends ``key`` to, and its endpoints."""
        el = self.view.els(set_name).get(key)
        if el is None or not el.value or not el.value[0].startswith(f"goto {names.RR_PREFIX}"):
            return None, ()
        own = el.value[0].removeprefix("goto ")
        ordered = sorted(self.view.els(own).values(), key=lambda e: int(e.key[0]) if e.key[0].isdigit() else 0)
        return own, _backends(e.value for e in ordered)

    def chain_binds(self, verdict: str, maps: Sequence[str]) -> bool:
        """Does the chain ``verdict`` goes to bind one of ``maps`` (``@name``)?"""
        chain = verdict.split(" ", 1)[1] if verdict.startswith(("goto ", "jump ")) else ""
        return any(m in rule.split() for rule in self.view.chains.get(chain, ()) for m in maps)


def _port_name(comment: str) -> tuple[str, str]:
    service, sep, port = comment.rpartition(":")
    return (service, port) if sep else (comment, "")


def _row(ix: _Index, set_name: str, el: Element) -> Row:
    view = ix.view
    nodeport = set_name in (names.SERVICE_NODEPORTS, names.NO_ENDPOINT_NODEPORTS)
    key = el.key
    if nodeport:
        address, (proto, port) = None, key
        kind = NODE_PORT
    else:
        address, proto, port = key
        kind = CLUSTER_IP if address in ix.cluster_ips else LOAD_BALANCER if key in ix.firewall else EXTERNAL
    service, port_name = _port_name(el.comment or "")
    verdict = el.value[0] if el.value else ""
    backends: tuple[Backend, ...] = ()
    short: tuple[Backend, ...] = ()
    algorithm: str | None = None
    policy: str | None
    if set_name in (names.NO_ENDPOINT_SERVICES, names.NO_ENDPOINT_NODEPORTS):
        # reject: no usable endpoint at all; drop: endpoints exist, none here (a Local policy)
        state, policy = (NO_LOCAL_ENDPOINTS, LOCAL) if verdict == "drop" else (NO_ENDPOINTS, None)
    else:
        rr_all, rr_local = (
            (names.RR_NODEPORTS, names.RR_LOCAL_NODEPORTS) if nodeport else (names.RR_SERVICES, names.RR_LOCAL_SERVICES)
        )
        own, rr_backends = ix.rr(rr_all, key)
        if kind == CLUSTER_IP:  # internalTrafficPolicy: one list, this node's under Local
            if own is not None:
                local = balancing.rr_local(own)
                backends, algorithm = rr_backends, balancing.ROUND_ROBIN
            else:
                local = (True, key) in ix.spreads
                backends, algorithm = ix.spread(local, key)
        else:  # externalTrafficPolicy: Local has this node's list, and all of them for pods and the node
            sc = names.NODEPORT_SHORT_CIRCUIT if nodeport else names.LOCAL_POLICY_SHORT_CIRCUIT
            local = key in view.els(sc) or ix.chain_binds(verdict, _LOCAL_POLICY_MAPS)
            if own is not None:
                algorithm = balancing.ROUND_ROBIN
                backends = ix.rr(rr_local, key)[1] if local else rr_backends
                short = rr_backends if local else ()
            elif local:
                backends, local_algorithm = ix.spread(True, key)
                short, algorithm = ix.spread(False, key)
                algorithm = algorithm or local_algorithm
            else:
                backends, algorithm = ix.spread(False, key)
        policy = LOCAL if local else CLUSTER
        state = ACTIVE if backends else NO_LOCAL_ENDPOINTS if local else NO_ENDPOINTS
    affinity = view.els(names.AFFINITY_NODEPORTS if nodeport else names.AFFINITY_SERVICES).get(key)
    timeout = names.affinity_timeout_of(affinity.value[0]) if affinity is not None and affinity.value else None
    return Row(
        service, port_name, view.family.value, kind, address, int(port), proto.upper(), state, backends, short,
        policy, timeout, algorithm, tuple(sorted(ix.allowed.get(key, ()))) if not nodeport else (),
    )  # fmt: skip


def _order(r: Row) -> tuple[str, str, str, int, str, int]:
    return (r.service, r.port_name, r.family, _TYPE_ORDER.get(r.type, 3), r.address or "", r.port)


def rows(view: TableView) -> list[Row]:
    """Every frontend of one table, sorted by Service, port, type and address."""
    ix = _Index(view)
    out = [
        _row(ix, set_name, el)
        for set_name in names.DISPATCH_MAPS
        for el in view.els(set_name).values()
        if el.comment is not None
    ]
    out.sort(key=_order)
    return out


def listing(views: Sequence[TableView | None]) -> Listing:
    """``views``: one per family (None: that table does not exist). Rows of the same Service port
    are together, IPv4 before IPv6."""
    present = [v for v in views if v is not None]
    all_rows = [r for v in present for r in rows(v)]
    all_rows.sort(key=_order)
    return Listing(
        tuple(f"{v.family.value} {v.name}" for v in present),
        {v.family.value: tuple(sorted(k[0] for k in v.keys(names.NODEPORT_IPS))) for v in present},
        tuple(all_rows),
    )


# -- text ---------------------------------------------------------------------------------

HEADER = ("SERVICE", "PORT", "TYPE", "FRONTEND", "POLICY", "BACKENDS")


def policy_text(r: Row) -> str:
    parts = []
    if r.traffic_policy == LOCAL:
        parts.append(f"{'iTP' if r.type == CLUSTER_IP else 'eTP'}=Local")
    if r.session_affinity_timeout is not None:
        parts.append(f"affinity={r.session_affinity_timeout}s")
    if r.load_balancing not in (None, balancing.RANDOM):
        parts.append(f"lb={r.load_balancing}")
    if r.source_ranges:
        parts.append(f"ranges={','.join(r.source_ranges)}")
    return " ".join(parts) or "-"


def backends_text(r: Row) -> str:
    if r.state == NO_ENDPOINTS:
        return "(no endpoints: rejected)"
    text = ", ".join(b.label for b in r.backends)
    if r.state == NO_LOCAL_ENDPOINTS:
        text = "(none on this node: dropped)"
    if r.short_circuit_backends:
        text += f"; from pods and this node: {', '.join(b.label for b in r.short_circuit_backends)}"
    return text


def render_text(result: Listing) -> str:
    if not result.tables:
        return "no nftproxy table in this network namespace (nftproxy has not programmed it)\n"
    table = [HEADER] + [
        (r.service, r.port_name or "-", r.type, r.frontend, policy_text(r), backends_text(r)) for r in result.frontends
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER) - 1)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(line, widths, strict=False)), line[-1]]) for line in table]
    for family, addrs in result.nodeport_addresses.items():
        if any(r.type == NODE_PORT and r.family == family for r in result.frontends):
            any_addr = "0.0.0.0" if family == "ip" else "[::]"
            lines.append(f"NodePorts ({any_addr}) answer on: {', '.join(addrs) or '(no address)'}")
    services = len({r.service for r in result.frontends})
    lines.append(f"{services} Services, {len(result.frontends)} frontends ({', '.join(result.tables)})")
    return "\n".join(line.rstrip() for line in lines) + "\n"
