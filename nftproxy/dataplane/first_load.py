"""The first load of a big table, from scratch: in steps, each one kernel transaction, while the
next step compiles (the kernel's commit releases the GIL: the second core works).

Per chunk of Services (in name order): the per-count objects the chunk needs first and its
endpoint-map entries, as packed netlink batches; then, last, every other element. Endpoint maps
are only reached through the dispatch maps, whose elements all come in the last step: until then
the table holds no Service at all, as before it existed. A failure deletes what was created.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from nftproxy import heap
from nftproxy.compiler import names
from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import compile_fragment
from nftproxy.dataplane.tracker import InputTracker
from nftproxy.nft.backend import Backend, NftError, PartialLoadError
from nftproxy.nft.bulk import ElementLoad, LoadStep
from nftproxy.nft.diff import create
from nftproxy.nft.objects import Element, Family, Spread
from nftproxy.nft.transaction import Transaction

log = logging.getLogger("nftproxy.dataplane")


TopUp = Callable[[], object]
"""Called in the loading thread before the last step: feeds the inputs the changes made while the
load ran (the operator's ``ChangeTracker.top_up``)."""


class Compiling(Protocol):
    """What a first load loads: the inputs, compiled into the per-family assemblies of a config
    (``sync.Dataplane``)."""

    config: ProxyConfig
    assemblies: dict[Family, Assembly]
    inputs: InputTracker

    def compile(self, keys: list[str] | None = None) -> None:
        """Compile the changed Services (``keys``: these only) into the assemblies."""


class FirstLoad:
    def __init__(self, backend: Backend, desired: Compiling) -> None:
        self.backend = backend
        self.desired = desired
        self.config = desired.config
        self.assemblies = desired.assemblies
        self.inputs = desired.inputs
        self.chunked = False
        self.chunks = 1
        self.top_up: TopUp | None = None

    def run(self, chunked: bool, chunks: int, top_up: TopUp | None) -> tuple[list[Transaction], int]:
        """Load; return the transactions sent and the elements sent by element loads. If it
        fails, the tables it created are deleted again: the kernel holds no nftproxy table, as
        before (never a half-loaded one). ``chunked``: compile in ``chunks`` chunks while the
        kernel loads; ``top_up``: see ``_top_up``."""
        self.chunked, self.chunks, self.top_up = chunked, chunks, top_up
        steps: list[LoadStep] = []

        def record(it: Iterator[LoadStep]) -> Iterator[LoadStep]:
            for step in it:
                steps.append(step)
                yield step

        try:
            with heap.bulk_compile():
                batched = self.backend.load(record(self._steps()))
        except NftError as e:
            if self._roll_back():
                raise NftError(f"{e} (the first load was rolled back: no nftproxy table, as before)", e.errno) from e
            raise PartialLoadError(
                f"{e} (a half-loaded table could not be removed: see `nft list ruleset`)", e.errno
            ) from e
        batched -= sum(tx.element_changes() for s in steps for tx in s.txs)
        return [tx for s in steps for tx in s.txs], batched

    def _roll_back(self) -> bool:
        """Delete the tables a failed first load created; False if one could not be deleted."""
        ok = True
        for f in self.assemblies:
            try:
                self.backend.delete(f, self.config.table)  # False: it was never created
            except Exception as e:
                log.error("rolling back the first load of table %s %s: %s", f.value, self.config.table, e)
                ok = False
        return ok

    def _steps(self) -> Iterator[LoadStep]:
        """The load in steps: per chunk of Services (in name order), the per-count objects first
        needed by the chunk and its endpoint-map entries; then, last, every other element.

        Endpoint maps are only reached through the dispatch maps (`service-ips`,
        `service-nodeports`, `no-endpoint-*`, …), whose elements all come in the last step:
        until then the table holds no Service at all, as before it existed."""
        assemblies = list(self.assemblies.values())
        chunked = self.chunked
        if chunked:
            keys, rivals = _rivals_apart(sorted(self.inputs.dirty), self.inputs)
            size = -(-len(keys) // max(1, self.chunks))
            chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
            if rivals:
                chunks.append(rivals)
        else:
            self.desired.compile()
            chunks = [sorted({key for a in assemblies for key in a.fragments})]
        declared: dict[Family, set[tuple[str, int]]] = {}
        for part in chunks:
            if self.inputs.dirty:
                self.desired.compile(part)
            yield self._chunk_step(part, declared, chunked)
        if chunked and self.top_up is not None:
            extra = self._top_up({key for part in chunks for key in part})
            if extra:
                yield self._chunk_step(extra, declared, chunked)
        loads = []
        for a in assemblies:
            t = a.table(expand=False)
            for name, els in t.elements.items():
                if name == EARLY_SET and chunked:
                    continue  # every element came with its chunk (_chunk_step)
                if els and not t.sets[name].dynamic:
                    loads.append(ElementLoad(a.family, t.name, t.sets[name], list(els.values())))
        yield LoadStep([], loads)

    def _chunk_step(self, part: list[str], declared: dict[Family, set[tuple[str, int]]], early: bool) -> LoadStep:
        """The step of one compiled chunk: the objects it needs first, its endpoint-map entries
        (and, ``early``, its elements of EARLY_SET)."""
        txs, loads = [], []
        for a in self.assemblies.values():
            txs.append(self._declare(a, declared))
            for map_name, entries in _spreads_of(a, part).items():
                the_map = a.render.set_named(a.store, map_name)
                loads.append(ElementLoad(a.family, self.config.table, the_map, (), entries))
            if early and (els := _early_elements(a, part)):
                loads.append(ElementLoad(a.family, self.config.table, a.render.set_named(a.store, EARLY_SET), els))
        return LoadStep(txs, loads)

    def _top_up(self, loaded: set[str]) -> list[str]:
        """The inputs changed while the chunks loaded (``top_up``), compiled: the Services to
        load as one more chunk before the last step. A change made while a first load of 10k
        Services runs (~0.7 s) then reaches the kernel with it, not in a sync after it.

        Only new Services that claim no frontend held already: the steps only add elements, so
        a Service an earlier step loaded (or one that would take its frontends) stays dirty, for
        the next (partial) sync."""
        assert self.top_up is not None
        self.top_up()
        merged = []
        assemblies = list(self.assemblies.values())
        for key in sorted(self.inputs.dirty - loaded):
            svc, slices = self.inputs.inputs(key)
            frags = [None if svc is None else compile_fragment(svc, slices, a.family, self.config) for a in assemblies]
            if any(
                frag is not None and any(a.claims.owners.get(c, key) != key for c in frag.claims)
                for a, frag in zip(assemblies, frags, strict=True)
            ):
                continue
            for a, frag in zip(assemblies, frags, strict=True):
                a.put(key, frag)
            merged.append(key)
        self.inputs.dirty.difference_update(merged)
        return merged

    def _declare(self, a: Assembly, declared: dict[Family, set[tuple[str, int]]]) -> Transaction:
        """The table (first call) and the per-count objects not declared yet."""
        tx = Transaction(a.family, self.config.table)
        done = declared.get(a.family)
        if done is None:  # every element comes later, by element loads
            t = a.table(expand=False)
            create(tx, t, skip_elements=frozenset(t.sets))
            declared[a.family] = set(a.objects)
        else:
            a.render.declare(tx, sorted(set(a.objects) - done))
            done.update(a.objects)
        return tx


# The set whose elements a chunked first load sends with each chunk, not in the last step: it is
# only read for packets a dispatch map already sent to an endpoint, so it serves no Service early.
# It is the biggest set (an entry per local endpoint; 10^5 at 10k Services x 10 without a node
# name), and in the last step its commit came after the whole compile; with the chunks it
# overlaps the next chunk's compile (bench.apply; figures in docs/performance.md).
# Each chunk's elements are all its Services' (an element two chunks share is added twice: the
# kernel accepts an add of an element it holds); together they are the whole set, since a hairpin
# element is an endpoint's, whichever frontend a Service loses (claims.py).
EARLY_SET = names.HAIRPIN_ENDPOINTS


def _rivals_apart(keys: list[str], inputs: InputTracker) -> tuple[list[str], list[str]]:
    """``keys`` split into the Services that cannot contest a frontend, and those that may (they
    go together in the last chunk). A chunk's endpoint-map entries are loaded as they are
    compiled, and only added: were a Service of a later chunk to take a frontend from one of an
    earlier chunk (claims.py), the loser's entries for it would stay in the kernel. Only an IP
    frontend can be contested (the apiserver allocates ClusterIPs and NodePorts once): an
    externalIP or LoadBalancer IP that is also another Service's ClusterIP, externalIP or
    LoadBalancer IP. Few Services have either, so this costs a dict lookup per Service."""
    services = inputs.services
    shared: dict[object, int] = {}
    for key in keys:
        svc = services.get(key)
        if svc is not None and (svc.external_ips or svc.load_balancer_ips):
            for ip in set(svc.external_ips) | set(svc.load_balancer_ips):
                shared[ip] = shared.get(ip, 0) + 1
    if not shared:
        return keys, []
    contested = {ip for ip, n in shared.items() if n > 1}
    contested.update(ip for key in keys if (svc := services.get(key)) for ip in svc.cluster_ips if ip in shared)
    if not contested:
        return keys, []
    rivals = [
        key
        for key in keys
        if (svc := services.get(key)) is not None
        and any(ip in contested for ip in (*svc.cluster_ips, *svc.external_ips, *svc.load_balancer_ips))
    ]
    apart = set(rivals)
    return [k for k in keys if k not in apart], rivals


def _early_elements(a: Assembly, keys: list[str]) -> list[Element]:
    frags = a.fragments
    return [el for key in keys if (f := frags.get(key)) is not None for s, el in f.elements if s == EARLY_SET]


def _spreads_of(a: Assembly, keys: list[str]) -> dict[str, list[Spread]]:
    """The endpoint map entries of these Services' fragments, by map."""
    out: dict[str, list[Spread]] = {}
    for key in keys:
        frag = a.fragments.get(key)
        if frag is not None:
            for map_name, k, values in frag.spreads:
                out.setdefault(map_name, []).append((k, values))
    return out
