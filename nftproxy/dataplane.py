"""The syncer's core: keep the desired tables per Service, commit changes as ONE transaction.

Inputs arrive one object at a time (``set_service``, ``set_slice``, …); only the Services they
touch are recompiled. ``sync`` sends either the delta since the last commit (incremental), or,
when what the kernel holds is unknown (at start, after any failure: libnftables can report a
failed large commit that went through), reads the kernel's table back and sends the difference
to the whole desired table (full).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from nftproxy import tracemark
from nftproxy.compiler import skeleton
from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.build import orphan_slices, summarize
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import Slot, compile_fragment, spread_elements
from nftproxy.model.types import EndpointSlice, Service, Skipped
from nftproxy.nft.diff import create, plan
from nftproxy.nft.kernel import Backend
from nftproxy.nft.netlink import Batch, Layout
from nftproxy.nft.objects import Family, Key, Set, Table
from nftproxy.nft.transaction import Transaction

log = logging.getLogger("nftproxy.dataplane")


def _spreads_of(a: Assembly, keys: list[str]) -> dict[str, list[tuple[Key, tuple[Slot, ...]]]]:
    """The endpoint map entries of these Services' fragments, by map."""
    out: dict[str, list[tuple[Key, tuple[Slot, ...]]]] = {}
    for key in keys:
        frag = a.fragments.get(key)
        if frag is not None:
            for map_name, k, values in frag.spreads:
                out.setdefault(map_name, []).append((k, values))
    return out


def _set_of(a: Assembly, name: str) -> Set:
    for obj in a.objects:
        for s in a.object_parts(obj)[0]:
            if s.name == name:
                return s
    raise KeyError(name)


@contextmanager
def _gc_paused(pause: bool, freeze: bool = False) -> Iterator[None]:
    """A bulk compile allocates ~10^6 tuples and no cycles: the cyclic GC only costs (x2.5).

    ``freeze``: what is alive afterwards is long-lived compiled state; gc.freeze moves it out of
    the collector's reach (refcounting still frees it), or the next collections walk it all."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()


@dataclass(frozen=True)
class SyncResult:
    full: bool  # compared with the table read back from the kernel
    operations: int  # nft commands sent
    element_changes: int  # elements added or deleted
    seconds: float  # plan + commit


class Dataplane:
    def __init__(self, backend: Backend, config: ProxyConfig) -> None:
        self.backend = backend
        self.services: dict[str, Service] = {}
        self.slices: dict[str, EndpointSlice] = {}
        self.slices_by_service: dict[str, dict[str, EndpointSlice]] = defaultdict(dict)
        self.ignored: set[str] = set()
        self.in_sync = False  # the kernel holds what the assemblies last committed
        self.dirty: set[str] = set()  # Services to recompile before the next read or sync
        self.config = config
        self.assemblies = {f: Assembly(f, config) for f in Family}
        self.bulk_elements = 20_000  # a first creation this big loads its elements by netlink
        self.stream_services = 2_000  # … and from this many Services (from scratch), in chunks
        self.stream_chunks = 8
        self.batched = 0  # elements the last sync sent by netlink

    # -- inputs --------------------------------------------------------------------------
    def set_config(self, config: ProxyConfig) -> None:
        if config == self.config:
            return
        self.config = config
        self.assemblies = {f: Assembly(f, config) for f in Family}
        self.dirty.update(self.services)
        self.in_sync = False

    def set_service(self, svc: Service) -> None:
        self.ignored.discard(svc.key)
        if self.services.get(svc.key) != svc:
            self.services[svc.key] = svc
            self._recompile(svc.key)

    def ignore_service(self, key: str) -> None:
        """A Service that exists but is not ours to proxy (headless, other proxy's label …)."""
        self.delete_service(key)
        self.ignored.add(key)

    def delete_service(self, key: str) -> None:
        self.ignored.discard(key)
        if self.services.pop(key, None) is not None:
            self._recompile(key)

    def set_slice(self, sl: EndpointSlice) -> None:
        old = self.slices.get(sl.key)
        if old == sl:
            return
        self.slices[sl.key] = sl
        if old is not None and old.service_key != sl.service_key:
            self.slices_by_service[old.service_key].pop(sl.key, None)
            self._recompile(old.service_key)
        self.slices_by_service[sl.service_key][sl.key] = sl
        self._recompile(sl.service_key)

    def delete_slice(self, key: str) -> None:
        old = self.slices.pop(key, None)
        if old is not None:
            self.slices_by_service[old.service_key].pop(key, None)
            self._recompile(old.service_key)

    def _recompile(self, key: str) -> None:
        self.dirty.add(key)

    def _flush(self) -> None:
        """Recompile the Services changed since the last call, each once, in name order."""
        with _gc_paused(len(self.dirty) > 1000, freeze=True):
            self._compile_dirty()

    def _compile_dirty(self) -> None:
        self._compile(sorted(self.dirty))

    def _compile(self, keys: list[str]) -> None:
        """Compile these dirty Services (in this order: the first by name claims a frontend)."""
        for a in self.assemblies.values():
            a.tracking = self.in_sync  # not in sync: the next sync is full, deltas are unused
        for key in keys:
            svc = self.services.get(key)
            slices = [s for _, s in sorted(self.slices_by_service.get(key, {}).items())]
            for a in self.assemblies.values():
                frag = None if svc is None else compile_fragment(svc, slices, a.family, self.config)
                a.put(key, frag)
        self.dirty.difference_update(keys)

    @property
    def pending(self) -> int:
        """Services changed and not yet compiled."""
        return len(self.dirty)

    def compile(self) -> None:
        """Compile what changed now (``sync`` and the readers below do it anyway)."""
        self._flush()

    # -- reading -------------------------------------------------------------------------
    def tables(self) -> list[Table]:
        self._flush()
        return [a.table() for a in self.assemblies.values()]

    def health_checks(self) -> dict[int, tuple[str, int]]:
        """healthCheckNodePort -> (Service, endpoints on this node), for eTP Local LoadBalancers."""
        self._flush()
        out: dict[int, tuple[str, set[str]]] = {}
        for a in self.assemblies.values():
            for frag in a.fragments.values():
                if frag.health_check_port:
                    key, addrs = out.setdefault(frag.health_check_port, (frag.key, set()))
                    if key == frag.key:
                        addrs.update(frag.local_endpoints)
        return {port: (key, len(addrs)) for port, (key, addrs) in out.items()}

    def checksum(self) -> str:
        """sha256 of the programmed contents (chain names, every element), in a canonical order."""
        self._flush()
        h = hashlib.sha256()
        for a in self.assemblies.values():
            for line in a.content_lines():
                h.update(line.encode())
        return h.hexdigest()

    def stats(self) -> tuple[int, int, list[Skipped]]:
        """(Services programmed, endpoints programmed, objects skipped with reasons)."""
        self._flush()
        n_svc, n_eps, skipped = summarize(self.assemblies.values())
        orphans = orphan_slices(self.slices.values(), self.services.keys(), self.ignored)
        return n_svc, n_eps, orphans + skipped

    # -- syncing -------------------------------------------------------------------------
    def verify(self) -> bool:
        """Cheap check, right after a sync, that the kernel still has our table as we left it (its
        chains: listing them fetches no set elements). On a mismatch, forget: the next sync is a
        full one (which reads the kernel's table back and repairs it)."""
        if not self.in_sync:
            return False
        for a in self.assemblies.values():
            have = self.backend.chain_names(a.family, self.config.table)
            if have is not None:  # a trace in progress is tolerated until its deadline
                have -= tracemark.live(have)
            if have != a.chain_names():
                self.forget()
                return False
        return True

    def forget(self) -> None:
        """Distrust what we think the kernel holds: the next sync is a full one."""
        self.in_sync = False

    def sync(self) -> SyncResult:
        start = time.perf_counter()
        full = not self.in_sync
        txs: list[Transaction] = []
        self.batched = 0
        try:
            if full:
                applied = {a.family: self.backend.read(a.family, self.config.table) for a in self.assemblies.values()}
                if not (all(t is None for t in applied.values()) and self._bulk_create(txs)):
                    self._flush()
                    tables = [a.table() for a in self.assemblies.values()]
                    txs += [plan(applied[t.family], t) for t in tables]
                    self.backend.apply(*txs)
            else:
                self._flush()
                txs += [a.delta() for a in self.assemblies.values()]
                self.backend.apply(*txs)
        except Exception:
            self.in_sync = False
            raise
        for a in self.assemblies.values():
            if not full:
                if a.stale_udp:
                    self.backend.clear_udp_conntrack(a.family, a.stale_udp)
                self._release_affinity(a)
            a.commit()
        self.in_sync = True
        return SyncResult(
            full=full,
            operations=sum(len(tx) for tx in txs),
            element_changes=sum(tx.element_changes() for tx in txs) + self.batched,
            seconds=time.perf_counter() - start,
        )

    def _bulk_create(self, txs: list[Transaction]) -> bool:
        """First creation of a big table (none in the kernel): declarations and rules by nft, set
        and map elements by netlink (nft's parser costs ~11 µs per element, a packed batch ~2 µs).

        From scratch with many Services, the compile runs in chunks: while the backend's worker
        commits one chunk's endpoint-map elements (the kernel holds no GIL), the next compiles.
        Endpoint maps are only reached through the dispatch maps (`service-ips`,
        `service-nodeports`, `no-endpoint-*`, …), whose elements all go in the last commit: until
        then the table holds no Service at all, as before it existed."""
        apply_async = getattr(self.backend, "apply_async", None)
        send_async = getattr(self.backend, "send_batch_async", None)
        if apply_async is None or send_async is None:
            return False
        assemblies = list(self.assemblies.values())
        fresh = not any(a.fragments or a.conflicts for a in assemblies)  # every put is an addition
        chunked = fresh and len(self.dirty) >= self.stream_services
        if chunked:
            keys = sorted(self.dirty)
            size = -(-len(keys) // max(1, self.stream_chunks))
            chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
        else:
            self._flush()
            if sum(a.element_count() for a in assemblies) < self.bulk_elements:
                return False
            chunks = [sorted({key for a in assemblies for key in a.fragments})]
        declared: dict[Family, set[tuple[str, int]] | None] = {a.family: None for a in assemblies}
        layouts: dict[tuple[Family, str], Layout | None] = {}
        pending = []
        with _gc_paused(True, freeze=chunked):  # packing allocates ~10^5 objects, no cycles
            for part in chunks:
                if chunked:
                    self._compile(part)
                batch = Batch()
                step = [self._declare(a, declared) for a in assemblies]
                for a, tx in zip(assemblies, step, strict=True):
                    for map_name, entries in _spreads_of(a, part).items():
                        if (a.family, map_name) not in layouts:
                            layouts[(a.family, map_name)] = Layout.for_set(_set_of(a, map_name))
                        lay = layouts[(a.family, map_name)]
                        if lay is None:  # not packable: nft text (never the case for the maps of today)
                            tx.add_elements(map_name, [e for k, v in entries for e in spread_elements(k, v)])
                        else:
                            packed = [b for k, v in entries for b in lay.pack_spread(k, v)]
                            batch.add(a.family.value, self.config.table, map_name, packed)
                txs += step
                pending += [apply_async(*step), send_async(batch)]
                self.batched += batch.count
            # The last commits: interval-set elements by nft, then every other element by netlink.
            last = Batch()
            final = []
            for a in assemblies:
                table = a.table(expand=False)
                tx = Transaction(a.family, table.name)
                for name, els in table.elements.items():
                    if not els or table.sets[name].dynamic:
                        continue
                    lay = Layout.for_set(table.sets[name])
                    if lay is None:
                        tx.add_elements(name, els.values())
                    else:
                        last.add(a.family.value, table.name, name, [lay.pack(e) for e in els.values()])
                final.append(tx)
            txs += final
            pending += [apply_async(*final), send_async(last)]
            self.batched += last.count
        for future in pending:
            future.result()  # in order: the first failure is raised (the next sync is a full one)
        return True

    def _declare(self, a: Assembly, declared: dict[Family, set[tuple[str, int]] | None]) -> Transaction:
        """The table (first call) and the per-count objects not declared yet."""
        tx = Transaction(a.family, self.config.table)
        done = declared[a.family]
        if done is None:
            create(tx, a.table(expand=False), skip_elements=frozenset(a.base_sets) | frozenset(a.static))
            declared[a.family] = set(a.objects)
        else:
            a.declare(tx, sorted(set(a.objects) - done))
            done.update(a.objects)
        return tx

    def _release_affinity(self, a: Assembly) -> None:
        """Clients stuck (sessionAffinity) to an endpoint that went away are released. Best effort,
        after the commit: entries also expire by themselves."""
        lost = {
            (ip, proto, port, ep, ep_port)
            for ip, proto, port, ep, ep_port in a.lost
            if a.affinity_frontend(ip, proto, port)
        }
        if not lost:
            return
        try:
            entries = self.backend.read_elements(a.family, self.config.table, skeleton.AFFINITY)
            stale = [
                key
                for key, el in entries.items()
                if el.value and ((key[1], key[2], key[3], *el.value) in lost or ("", key[2], key[3], *el.value) in lost)
            ]
            if stale:
                tx = Transaction(a.family, self.config.table)
                tx.delete_elements(skeleton.AFFINITY, stale)
                self.backend.apply(tx)
        except Exception as e:  # an entry expired meanwhile: it is gone anyway
            log.debug("releasing affinity entries: %s", e)

    def cleanup(self) -> list[Family]:
        """Remove nftproxy's own tables (and nothing else)."""
        self.in_sync = False
        return [f for f in Family if self.backend.delete(f, self.config.table)]
