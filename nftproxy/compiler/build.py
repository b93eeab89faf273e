"""desired state = f(services, endpointslices, config): one Table per family."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import compile_fragment
from nftproxy.model.types import EndpointSlice, Service, Skipped
from nftproxy.nft.objects import Family, Table


@dataclass(frozen=True)
class Desired:
    tables: tuple[Table, ...]
    skipped: tuple[Skipped, ...]
    services: int  # Services with at least one port programmed
    endpoints: int  # distinct endpoint address:port pairs programmed


def orphan_slices(
    slices: Iterable[EndpointSlice], services: Collection[str], ignored: Collection[str]
) -> list[Skipped]:
    return [
        Skipped("EndpointSlice", s.namespace, s.name, f"no Service {s.service_key}")
        for s in slices
        if s.service_key not in services and s.service_key not in ignored
    ]


def summarize(assemblies: Iterable[Assembly]) -> tuple[int, int, list[Skipped]]:
    """(Services programmed, endpoints programmed, Services left out): no walk of the table
    (of the second family's Services only, in a dual-stack cluster: the Services in both count once)."""
    assemblies = list(assemblies)
    frags = sorted((a.store.fragments for a in assemblies), key=len, reverse=True)
    services = len(frags[0]) + sum(k not in frags[0] for f in frags[1:] for k in f) if frags else 0
    endpoints = sum(len(a.store.endpoints) for a in assemblies)  # families: distinct addresses
    skipped: dict[str, Skipped] = {}
    for a in assemblies:
        for s in a.skipped():
            skipped.setdefault(str(s), s)
        for frag in a.store.warned.values():  # programmed, but reported (e.g. a bad annotation)
            ns, _, name = frag.key.partition("/")
            for w in frag.warnings:
                x = Skipped("Service", ns, name, w)
                skipped.setdefault(str(x), x)
    return services, endpoints, list(skipped.values())


def compile_tables(
    services: Iterable[Service],
    slices: Iterable[EndpointSlice],
    config: ProxyConfig,
    ignored_services: Collection[str] = (),
) -> Desired:
    """Pure and deterministic: a frontend two Services claim goes to the same one whatever the
    order (claims.py)."""
    svcs = sorted(services, key=lambda s: s.key)
    by_service: dict[str, list[EndpointSlice]] = defaultdict(list)
    all_slices = sorted(slices, key=lambda s: s.key)
    for sl in all_slices:
        by_service[sl.service_key].append(sl)
    assemblies = [Assembly(f, config) for f in Family]
    for a in assemblies:
        for svc in svcs:
            frag = compile_fragment(svc, by_service.get(svc.key, []), a.family, config)
            if frag is not None:
                a.put(svc.key, frag)
    n_services, n_endpoints, skipped = summarize(assemblies)
    skipped = orphan_slices(all_slices, {s.key for s in svcs}, ignored_services) + skipped
    return Desired(tuple(a.table() for a in assemblies), tuple(skipped), n_services, n_endpoints)
