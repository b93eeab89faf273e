"""Compile Services and EndpointSlices into one nftables Table per family."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from ipaddress import collapse_addresses, ip_network

from nftproxy.compiler import skeleton
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.endpoints import Target, cluster_endpoints, targets
from nftproxy.model.types import EndpointSlice, IPAddress, IPNetwork, Service, ServicePort, Skipped
from nftproxy.nft.objects import Chain, Element, Family, Key, Set, Table


@dataclass(frozen=True)
class Desired:
    tables: tuple[Table, ...]
    skipped: tuple[Skipped, ...]
    services: int  # Services with at least one port programmed
    endpoints: int  # distinct endpoint address:port pairs programmed


def compile_tables(
    services: Iterable[Service],
    slices: Iterable[EndpointSlice],
    config: ProxyConfig,
    ignored_services: Collection[str] = (),
) -> Desired:
    """desired state = f(services, endpointslices, config). Pure; deterministic output."""
    svcs = sorted(services, key=lambda s: s.key)
    by_service: dict[str, list[EndpointSlice]] = defaultdict(list)
    skipped: list[Skipped] = []
    known = {s.key for s in svcs}
    for sl in sorted(slices, key=lambda s: s.key):
        if sl.service_key in known:
            by_service[sl.service_key].append(sl)
        elif sl.service_key not in ignored_services:
            skipped.append(Skipped("EndpointSlice", sl.namespace, sl.name, f"no Service {sl.service_key}"))

    tables = []
    programmed: set[str] = set()
    endpoints: set[tuple[IPAddress, int]] = set()
    for family in (Family.IP, Family.IP6):
        b = _Builder(family, config)
        for svc in svcs:
            b.add_service(svc, by_service.get(svc.key, []))
        tables.append(b.table())
        skipped += b.skipped
        programmed |= b.programmed
        endpoints |= b.endpoints
    return Desired(tuple(tables), tuple(skipped), len(programmed), len(endpoints))


def _addr_or_cidr(net: IPNetwork) -> str:
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


@dataclass
class _Builder:
    family: Family
    config: ProxyConfig
    chains: dict[str, Chain] = field(default_factory=dict)
    sets: dict[str, Set] = field(default_factory=dict)
    elements: dict[str, dict[Key, Element]] = field(default_factory=lambda: defaultdict(dict))
    skipped: list[Skipped] = field(default_factory=list)
    programmed: set[str] = field(default_factory=set)
    endpoints: set[tuple[IPAddress, int]] = field(default_factory=set)
    owners: dict[Key, str] = field(default_factory=dict)  # frontend -> "ns/name" that claimed it

    def __post_init__(self) -> None:
        f = self.family
        for s in skeleton.base_sets(f):
            self.sets[s.name] = s
        for c in skeleton.base_chains(f):
            self.chains[c.name] = c
        mine = [n for n in self.config.cluster_cidrs if n.version == f.version]
        for net in collapse_addresses(mine):  # type: ignore[type-var]
            self._add("cluster-cidrs", Element((_addr_or_cidr(net),)))
        nodeport_nets: list[IPNetwork] = [n for n in self.config.nodeport_addresses if n.version == f.version]
        if not self.config.nodeport_addresses:
            nodeport_nets = [ip_network(ip) for ip in self.config.node_ips if ip.version == f.version]
        for net in collapse_addresses(nodeport_nets):  # type: ignore[type-var]
            self._add("nodeport-ips", Element((_addr_or_cidr(net),)))
        if self.config.masquerade_all:
            self.masquerade: str | None = "jump mark-for-masquerade"
        elif mine:
            self.masquerade = f"{f.value} saddr != @cluster-cidrs jump mark-for-masquerade"
        else:
            self.masquerade = None

    def _add(self, set_name: str, element: Element) -> None:
        self.elements[set_name][element.key] = element

    def table(self) -> Table:
        return Table(
            self.family,
            self.config.table,
            skeleton.layout_comment(self.family, self.masquerade),
            dict(self.chains),
            dict(self.sets),
            {name: dict(self.elements.get(name, {})) for name in self.sets},
        )

    # -- per Service ----------------------------------------------------------------------
    def add_service(self, svc: Service, slices: list[EndpointSlice]) -> None:
        version = self.family.version
        cluster_ips = [ip for ip in svc.cluster_ips if ip.version == version]
        if not cluster_ips:
            return
        atype = "IPv4" if version == 4 else "IPv6"
        mine = [s for s in slices if s.address_type == atype]
        externals = [ip for ip in (*svc.external_ips, *svc.load_balancer_ips) if ip.version == version]
        self._add("cluster-ips", Element((str(cluster_ips[0]),)))
        for port in svc.ports:
            usable = cluster_endpoints(targets(port, mine))
            self._add_port(svc, port, cluster_ips[0], externals, usable)

    def _add_port(
        self, svc: Service, port: ServicePort, cluster_ip: IPAddress, externals: list[IPAddress], usable: list[Target]
    ) -> None:
        proto = port.protocol.lower()
        comment = f"{svc.key}:{port.name}" if port.name else svc.key
        frontends = [(cluster_ip, "cluster")] + [(ip, "external") for ip in dict.fromkeys(externals)]
        keys = [(str(ip), proto, str(port.port)) for ip, _ in frontends]
        np_key = (proto, str(port.node_port)) if port.node_port else None
        for k in [*keys, *([np_key] if np_key else [])]:
            owner = self.owners.get(k)
            if owner is not None:
                what = " . ".join(k)
                self.skipped.append(Skipped("Service", svc.namespace, svc.name, f"{what} is already used by {owner}"))
                return
        for k in [*keys, *([np_key] if np_key else [])]:
            self.owners[k] = svc.key
        self.programmed.add(svc.key)

        if not usable:
            reject = ("goto reject-chain",)
            for k in keys:
                self._add("no-endpoint-services", Element(k, reject, comment))
            if np_key:
                self._add("no-endpoint-nodeports", Element(np_key, reject, comment))
            return

        n = len(usable)
        self._ensure_ip_objects(n)
        for k, (_, kind) in zip(keys, frontends, strict=True):
            self._add("service-ips", Element(k, (f"goto {kind}-{n}",), comment))
            for slot, t in enumerate(usable):
                self._add(f"endpoints-{n}", Element((*k, str(slot)), (str(t.address), str(t.port))))
        if np_key:
            self._ensure_nodeport_objects(n)
            self._add("service-nodeports", Element(np_key, (f"goto nodeport-{n}",), comment))
            for slot, t in enumerate(usable):
                self._add(f"nodeport-endpoints-{n}", Element((*np_key, str(slot)), (str(t.address), str(t.port))))
        for t in usable:
            self._add("hairpin-endpoints", Element((str(t.address), str(t.address))))
            self.endpoints.add((t.address, t.port))

    def _ensure_ip_objects(self, n: int) -> None:
        if f"load-balance-{n}" in self.chains:
            return
        f = self.family
        m = skeleton.endpoints_map(f, n)
        self.sets[m.name] = m
        for c in (
            skeleton.load_balance_chain(f, n),
            skeleton.cluster_chain(n, self.masquerade),
            skeleton.external_chain(n),
        ):
            self.chains[c.name] = c

    def _ensure_nodeport_objects(self, n: int) -> None:
        if f"nodeport-{n}" in self.chains:
            return
        m = skeleton.nodeport_endpoints_map(self.family, n)
        self.sets[m.name] = m
        c = skeleton.nodeport_chain(self.family, n)
        self.chains[c.name] = c
