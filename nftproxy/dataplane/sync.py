"""The syncer's core: inputs in, ONE transaction per sync out, then the cleanups.

Inputs arrive one object at a time into the InputTracker ``inputs`` (``inputs.set_service``,
…); only the Services they touch are recompiled into the per-family Assemblies (``compile``).
``sync`` sends either the delta since the last commit (partial), or, when what the kernel holds is
unknown (at start, after any failure: libnftables can report a failed large commit that went
through), reads the kernel's table back and sends the difference to the whole desired table
(full). A first load of a big table goes through the backend's ``load`` (first_load.py). A sync the kernel refuses is
retried without the Services it refuses (refused.py). After every successful sync, stale UDP
conntrack and affinity entries are reconciled with the new state (stale.py).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, replace

from nftproxy import heap
from nftproxy.compiler import names
from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.build import summarize
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import compile_fragment
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.dataplane.first_load import FirstLoad, TopUp
from nftproxy.dataplane.refused import find_refused, refused_skips
from nftproxy.dataplane.stale import Cleanup, StaleEntries
from nftproxy.dataplane.tracker import InputTracker
from nftproxy.model.types import Skipped
from nftproxy.nft.backend import Backend, NftError
from nftproxy.nft.conntrack import Conntrack
from nftproxy.nft.diff import create, plan
from nftproxy.nft.objects import Family, Table
from nftproxy.nft.transaction import DeleteTable, Transaction

log = logging.getLogger("nftproxy.dataplane")


@dataclass(frozen=True)
class SyncResult:
    full: bool  # compared with the table read back from the kernel
    operations: int  # nft commands sent
    element_changes: int  # elements added or deleted
    seconds: float  # plan + commit
    cleanups: tuple[Cleanup, ...] = ()  # of the families whose stale entries were looked at


class Dataplane:
    def __init__(self, backend: Backend, config: ProxyConfig, conntrack: Conntrack | None = None) -> None:
        self.backend = backend
        self.config = config
        self.inputs = InputTracker()  # the Services and EndpointSlices: callers write into it
        self.assemblies = _assemblies(config)
        self.in_sync = False  # the kernel holds what the assemblies last committed
        # a first creation this big goes through backend.load: nft parses ~11 µs per element, a
        # packed netlink batch ~0.7 µs (1k Services x 10 endpoints: ~0.5 s less to the first sync)
        self.bulk_elements = 2_000
        self.stream_services = 2_000  # … and from this many Services (from scratch), in chunks
        self.stream_chunks = 8
        self.batched = 0  # elements the last sync sent through backend.load
        # Services whose elements the kernel refused (family, key) -> why: left out of that
        # family's table until their inputs change or ``retry_refused`` (the next full sync).
        self.refused: dict[tuple[Family, str], str] = {}
        self.stale = StaleEntries(backend, conntrack)  # after every successful sync
        self.compiled_since_commit: set[str] = set()  # the first suspects when a sync is refused
        self._localhost: tuple[object, dict[int, dict[int, LocalhostNodePort]]] = ((), {})  # (key, value)

    def set_config(self, config: ProxyConfig) -> None:
        if config == self.config:
            return
        self.config = config
        self.assemblies = _assemblies(config)
        self._localhost = ((), {})  # (a new store may reuse an old one's id)
        self.inputs.everything_dirty()
        self.in_sync = False

    @property
    def sync_due(self) -> bool:
        """Inputs not synced yet (e.g. left by a first load's top-up), or the kernel's state unknown."""
        return bool(self.inputs.dirty) or not self.in_sync

    # -- compiling -----------------------------------------------------------------------
    def compile(self, keys: list[str] | None = None) -> None:
        """Recompile the Services changed since the last call (``keys``: these only), each once,
        in name order (the result does not depend on the order: claims.py). ``sync`` and the
        readers below do it anyway; a first load compiles chunk by chunk."""
        if keys is None:
            with heap.bulk_compile(len(self.inputs.dirty) > 1000):
                self.compile(sorted(self.inputs.dirty))
            return
        for a in self.assemblies.values():
            a.tracking = self.in_sync  # not in sync: the next sync is full, the log is unused
        refused = self.refused
        for key in keys:
            svc, slices = self.inputs.inputs(key)
            for a in self.assemblies.values():
                if refused:  # its inputs changed: it is tried again
                    refused.pop((a.family, key), None)
                a.put(key, None if svc is None else compile_fragment(svc, slices, a.family, self.config))
        self.inputs.dirty.difference_update(keys)
        self.compiled_since_commit.update(keys)

    # -- reading -------------------------------------------------------------------------
    def tables(self) -> list[Table]:
        self.compile()
        return [a.table() for a in self.assemblies.values()]

    def health_checks(self) -> dict[int, tuple[str, dict[int, int]]]:
        """healthCheckNodePort -> (Service, {IP version: endpoints of that family on this node}),
        for eTP Local LoadBalancers, with the families the Service has. kube-proxy's per-family
        proxiers each serve the port on their own family's addresses with their own count."""
        self.compile()
        out: dict[int, tuple[str, dict[int, set[str]]]] = {}
        for a in self.assemblies.values():
            for frag in a.store.health.values():
                if frag.health_check_port:
                    key, families = out.setdefault(frag.health_check_port, (frag.key, {}))
                    if key == frag.key:
                        families.setdefault(a.family.version, set()).update(frag.local_endpoints)
        return {port: (key, {v: len(eps) for v, eps in fams.items()}) for port, (key, fams) in out.items()}

    def no_local_endpoints(self) -> dict[tuple[str, int], int]:
        """(traffic policy, IP version) -> Service ports under that Local policy with usable
        endpoints but none on this node (their traffic is dropped), as kube-proxy counts them."""
        self.compile()
        out = {(p, a.family.version): 0 for a in self.assemblies.values() for p in ("internal", "external")}
        for a in self.assemblies.values():
            for frag in a.fragments.values():
                for policy in frag.no_local:
                    out[(policy, a.family.version)] += 1
        return out

    def localhost_nodeports(self) -> dict[int, dict[int, LocalhostNodePort]]:
        """{IP version: {NodePort: what the userspace proxy serves on that family's loopback}}:
        the TCP NodePorts of the families with localhost NodePorts (--nodeport-addresses
        localhost), of the Services that have the family, with the endpoints the compiler chose
        for the table. As compiled (a sync compiles first; not compiled here, so called after a
        successful sync it is what the kernel holds). Cheap when nothing changed: the same
        object is returned until a Service with a localhost NodePort changes."""
        key = tuple((id(a.store), a.store.localhost_generation) for a in self.assemblies.values())
        if self._localhost[0] != key:
            out: dict[int, dict[int, LocalhostNodePort]] = {}
            for a in self.assemblies.values():
                if self.config.localhost_nodeports(a.family.version):
                    ports = out[a.family.version] = {}
                    for frag in a.store.localhost.values():
                        ports.update((lh.node_port, lh) for lh in frag.localhost)
            self._localhost = (key, out)
        return self._localhost[1]

    def checksum(self) -> str:
        """sha256 of the programmed contents (chain names, every element), in a canonical order."""
        self.compile()
        h = hashlib.sha256()
        for a in self.assemblies.values():
            for line in a.content_lines():
                h.update(line.encode())
        return h.hexdigest()

    def stats(self) -> tuple[int, int, list[Skipped]]:
        """(Services programmed, endpoints programmed, objects skipped with reasons)."""
        self.compile()
        n_svc, n_eps, skipped = summarize(self.assemblies.values())
        return n_svc, n_eps, self.inputs.orphans() + skipped + refused_skips(self.refused)

    def retry_refused(self) -> None:
        """Try the refused Services again (at a full sync): compiled afresh by the next sync."""
        if self.refused:
            self.inputs.dirty.update(key for _, key in self.refused)
            self.refused.clear()

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
                have -= names.live_trace_chains(have)
            if have != a.chain_names():
                self.forget()
                return False
        return True

    def forget(self) -> None:
        """Distrust what we think the kernel holds: the next sync is a full one."""
        self.in_sync = False

    def sync(self, top_up: TopUp | None = None) -> SyncResult:
        """One sync. ``top_up``: called by a chunked first load (in this thread) before its last
        step; it may feed more inputs (the changes made while the load ran), merged into that
        step when they only add Services (first_load.py); the others wait for the next sync."""
        start = time.perf_counter()
        full = not self.in_sync
        self.batched = 0
        try:
            txs = self._full(top_up) if full else self._partial()
        except NftError as e:  # leave out the Services the kernel refuses, if any alone is to blame
            self.in_sync = False
            self.compile()
            found = find_refused(e, self.backend, self.assemblies.values(), self.config, self.compiled_since_commit)
            if not found:
                raise
            for family, key in found:
                self.assemblies[family].put(key, None)
            self.refused.update(found)
            full = True
            txs = self._full()  # the rest, without them (raises if the kernel refuses it still)
        except Exception:
            self.in_sync = False
            raise
        cleanups = []
        for a in self.assemblies.values():
            if (c := self.stale.clean_up_after(a, self.config.table, full)) is not None:
                cleanups.append(c)
            a.commit()
        self.in_sync = True
        self.compiled_since_commit.clear()
        return SyncResult(
            full=full,
            operations=sum(len(tx) for tx in txs),
            element_changes=sum(tx.element_changes() for tx in txs) + self.batched,
            seconds=time.perf_counter() - start,
            cleanups=tuple(cleanups),
        )

    def _partial(self) -> list[Transaction]:
        self.compile()
        txs = [a.delta() for a in self.assemblies.values()]
        self.backend.apply(*txs)
        return txs

    def _full(self, top_up: TopUp | None = None) -> list[Transaction]:
        """Compare with the table read back from the kernel, and send the difference; a first
        load of a big table (no table yet) goes through the backend's bulk ``load``."""
        table = self.config.table
        if any(self.backend.chain_names(f, table) is not None for f in self.assemblies):
            # A table is there (a restart): compile before reading it back. The other way round,
            # the compile's long-lived objects land among the read-back's ~10^6 short-lived ones
            # and keep their pymalloc arenas: a restarted proxy's RSS stays higher for good
            # (figures: docs/performance.md).
            self.compile()
        applied = {f: self.backend.read(f, table) for f in self.assemblies}
        if all(t is None for t in applied.values()) and self._wants_bulk():
            txs, self.batched = FirstLoad(self.backend, self).run(self._chunked(), self.stream_chunks, top_up)
            return txs
        self.compile()
        targets = {a.family: a.table() for a in self.assemblies.values()}
        txs = [plan(applied[f], t) for f, t in targets.items()]
        handover = names.handover_table(table)
        stale_handover = [f for f in targets if self.backend.chain_names(f, handover) is not None]
        if any(isinstance(op, DeleteTable) for tx in txs for op in tx.ops):
            _replace_with_handover(self.backend, txs, targets, handover, stale_handover)
        else:
            self.backend.apply(*txs, *(_delete_table(f, handover) for f in stale_handover))
        return txs

    def _wants_bulk(self) -> bool:
        if self._chunked():
            return True
        self.compile()
        return sum(a.element_count() for a in self.assemblies.values()) >= self.bulk_elements

    def _chunked(self) -> bool:
        """From scratch with many Services: compile in chunks while the kernel loads."""
        fresh = not any(a.fragments or a.claims.losers for a in self.assemblies.values())
        return fresh and len(self.inputs.dirty) >= self.stream_services

    def cleanup(self) -> list[Family]:
        """Remove nftproxy's own tables (and nothing else): a handover table a crash left too."""
        self.in_sync = False
        for f in Family:
            self.backend.delete(f, names.handover_table(self.config.table))
        return [f for f in Family if self.backend.delete(f, self.config.table)]


def _assemblies(config: ProxyConfig) -> dict[Family, Assembly]:
    return {f: Assembly(f, config) for f in Family}


def _replace_with_handover(
    backend: Backend, txs: list[Transaction], targets: dict[Family, Table], handover: str, stale: list[Family]
) -> None:
    """Replace the table (``txs`` delete and re-create it) with no moment in which its new
    sets are not yet live (names.HANDOVER_SUFFIX): the new contents first as the handover
    table, then the replacement, then the handover table deleted. If the replacement fails,
    the handover table is deleted too: the old table stays as it was."""
    if stale:
        backend.apply(*(_delete_table(f, handover) for f in stale))
    first = []
    for f, target in targets.items():
        tx = Transaction(f, handover)
        create(tx, replace(target, name=handover, comment=names.HANDOVER_COMMENT))
        first.append(tx)
    backend.apply(*first)
    try:
        backend.apply(*txs)
    finally:
        backend.apply(*(_delete_table(f, handover) for f in targets))


def _delete_table(family: Family, table: str) -> Transaction:
    tx = Transaction(family, table)
    tx.delete_table()
    return tx
