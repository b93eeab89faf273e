"""The libnftables backend: applies a Transaction as one kernel transaction, reads tables back
(nft's listings are read by listing.py, its errors by located.py)."""

from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from nftproxy.nft import bulk, listing, located, netlink
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.backend import NftError, invalid, is_not_found
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.listing import CountedElement
from nftproxy.nft.netlink import FAMILIES, Batch, Layout
from nftproxy.nft.objects import DynamicElement, Element, Family, Set, Table
from nftproxy.nft.transaction import AddElements, DeleteElements, Transaction

T = TypeVar("T")
log = logging.getLogger("nftproxy.nft")

BULK = 256 * 1024  # scripts larger than this (thousands of elements) go through an `nft` child


def _run_child(args: list[str], stdin: str | None) -> str:
    r = subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise located.error(r.stderr, stdin)
    return r.stdout


def _dry_run(script: str) -> None:
    _run_child(["-c", "-f", "-"], script)


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    import ctypes  # noqa: PLC0415

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class KernelBackend:
    """libnftables through Debian's ``nftables`` Python module.

    All calls run on one worker thread (netns.Worker), which first enters ``netns`` when given:
    the rest of the process (API client, metrics) stays where it is.
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._worker = netns_mod.Worker(netns, "nft")
        self._local = threading.local()
        self._layouts: dict[tuple[Family, str, Set], Layout | None] = {}  # how each set's elements pack

    def close(self) -> None:
        self._worker.close(self._drop_socket)  # in the worker thread, whose socket it is

    def _socket(self) -> socket.socket:
        """The worker thread's netlink socket for element batches, kept open (netlink.open_socket)."""
        sock = getattr(self._local, "sock", None)
        if sock is None:
            sock = self._local.sock = netlink.open_socket()
        return cast(socket.socket, sock)

    def _drop_socket(self) -> None:
        sock = getattr(self._local, "sock", None)
        self._local.sock = None
        if sock is not None:
            sock.close()

    def _send(self, batch: Batch) -> None:
        """netlink.send on the kept socket; after a failure the socket is dropped (it may hold the
        rest of the refused batch's answers): the next batch opens a new one."""
        try:
            netlink.send(batch, self._socket())
        except OSError:
            self._drop_socket()
            raise

    def _call(self, fn: Callable[[Any], T]) -> T:
        return self._submit(fn).result()

    def _submit(self, fn: Callable[[Any], T]) -> Future[T]:
        """Queue ``fn(context)`` for the worker thread: calls run one at a time, in order."""
        return self._worker.submit(lambda: fn(self._context()))

    def _context(self) -> Any:
        """The worker thread's libnftables context."""
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            import nftables  # noqa: PLC0415  (Debian module, linked into the venv by install.sh)

            ctx = nftables.Nftables()
            ctx.set_json_output(False)
            self._local.ctx = ctx
        return ctx

    def run(self, script: str, json_output: bool = False, terse: bool = False) -> str:
        def go(ctx: Any) -> str:
            ctx.set_json_output(json_output)
            ctx.set_terse_output(terse)
            try:
                rc, out, err = ctx.cmd(script)
            finally:
                ctx.set_json_output(False)
                ctx.set_terse_output(False)
            if rc != 0:
                raise located.error(err)
            return str(out)

        return self._call(go)

    def probe(self) -> int:
        """Is nf_tables usable here? libnftables loads (the context the first sync then uses is
        made now), and the kernel answers the cheapest question (the ruleset's generation) on the
        socket the element batches use, in this network namespace, which needs CAP_NET_ADMIN.
        ``list tables`` would also do, but nft 1.0.6 fetches every set's elements for it (~80 ms
        beside a 50k-element set). Returns the generation; raises OSError (or the import's error)."""
        return self._call(lambda _ctx: netlink.generation(self._socket()))

    def apply(self, *txs: Transaction) -> None:
        self.apply_async(*txs).result()

    def apply_async(self, *txs: Transaction) -> Future[None]:
        """Like ``apply``, queued: the kernel works while the caller goes on (FIFO with the rest).

        Transactions of element changes alone (a partial sync's usual delta), on sets whose
        declarations they carry and that can be packed, go as one netlink batch (one kernel
        transaction, as the script would be) without nft's parser and cache fetch (~1 ms). If
        the kernel refuses the batch (it then committed nothing), the script is sent as before,
        so the error is nft's, with the refused statement."""
        if (error := invalid(txs)) is not None:
            failed: Future[None] = Future()
            failed.set_exception(error)
            return failed
        script = "".join(tx.render() for tx in txs)
        batch = self._element_batch(txs)

        def go(ctx: Any) -> None:
            if batch is not None:
                try:
                    self._send(batch)
                    return
                except OSError as e:
                    log.debug("element batch refused (%s): sending the script for nft's error", e)
            if len(script) > BULK:
                _run_child(["-f", "-"], script)
            elif script:
                rc, _, err = ctx.cmd(script)
                if rc != 0:
                    raise located.located(script, err, _dry_run)

        return self._submit(go)

    def _element_batch(self, txs: Iterable[Transaction]) -> Batch | None:
        """``txs`` as one netlink element batch, in their order; None if any op is not an element
        change on a set it declares that can be packed (or an element cannot be packed)."""
        batch = Batch()
        for tx in txs:
            if tx.family.value not in FAMILIES:
                return None
            for op in tx.ops:
                if not isinstance(op, AddElements | DeleteElements):
                    return None
                s = tx.sets.get(op.set_name)
                lay = self._layout(tx.family, tx.table, s) if s is not None else None
                if lay is None:
                    return None
                try:
                    if isinstance(op, AddElements):
                        batch.add(tx.family.value, tx.table, op.set_name, lay.pack_all(op.elements))
                    else:
                        keys = [Element(k) for k in op.keys]
                        batch.add(tx.family.value, tx.table, op.set_name, lay.pack_all(keys), delete=True)
                except (OSError, ValueError):  # e.g. an address nft would refuse: nft says so
                    return None
        return batch if batch.count else None

    def _layout(self, family: Family, table: str, s: Set) -> Layout | None:
        key = (family, table, s)
        if key not in self._layouts:
            self._layouts[key] = Layout.for_set(s)
        return self._layouts[key]

    def check(self, *txs: Transaction) -> None:
        """A dry run in a short-lived `nft -c` child: this process's libnftables context keeps a
        cache that a dry run leaves behind (seen: the next dry run of the same table then
        failed with "interval overlaps with an existing one"), and the child also gives the
        refused statement's line."""
        if (error := invalid(txs)) is not None:
            raise error
        script = "".join(tx.render() for tx in txs)
        if script:
            self._child(["-c", "-f", "-"], script)

    def _child(self, args: list[str], stdin: str | None = None) -> str:
        """Run libnftables in a short-lived `nft` child (started from the worker thread, so in its
        network namespace): a bulk transaction's parse needs ~3 KB per element, which a child
        returns to the system when it exits instead of keeping it in this process."""

        return self._call(lambda _: _run_child(args, stdin))

    def read(self, family: Family, table: str) -> Table | None:
        try:
            out = self._child(["-j", "list", "table", family.value, table])
        except NftError as e:
            if is_not_found(e):
                return None
            raise
        # nft 1.0.6 leaves the table comment out of JSON: read it from a terse text listing.
        terse = self.run(f"list table {family.value} {table}", terse=True)
        return listing.table_from_json(json.loads(out), family, table, listing.table_comment(terse))

    def chain_rules(self, family: Family, table: str) -> dict[str, tuple[str, ...]] | None:
        try:
            terse = self.run(f"list table {family.value} {table}", terse=True)
        except NftError as e:
            if is_not_found(e):
                return None
            raise
        return listing.parse_rules(terse)

    def monitor(self, *args: str) -> subprocess.Popen[bytes]:
        """``nft monitor ARGS`` (its output piped), forked by the worker thread: in the backend's
        network namespace, and ended when this process dies (PR_SET_PDEATHSIG follows the thread
        that forked it, which lives as long as the backend)."""
        return self._call(
            lambda _: subprocess.Popen(
                ["nft", "monitor", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                bufsize=0,
                preexec_fn=_die_with_parent,  # noqa: PLW1509  (prctl only)
            )
        )

    def chain_names(self, family: Family, table: str) -> set[str] | None:
        doc = json.loads(self.run(f"list chains {family.value}", json_output=True))
        return listing.chain_names(doc, table)

    def read_dynamic(self, family: Family, table: str, set_name: str) -> list[DynamicElement]:
        doc = json.loads(self.run(f"list map {family.value} {table} {set_name}", json_output=True))
        return listing.dynamic_elements(doc)

    def counter_packets(self, family: Family, table: str) -> dict[str, int]:
        try:
            doc = json.loads(self.run(f"list counters table {family.value} {table}", json_output=True))
        except NftError as e:
            if is_not_found(e):
                return {}
            raise
        return listing.counter_packets(doc, table)

    def counted_elements(self, family: Family, table: str, sets: Iterable[Set]) -> dict[str, list[CountedElement]]:
        items: list[Any] = []
        for s in sets:  # one listing each (nft 1.0.6 refuses a second `list` in one call)
            try:
                doc = json.loads(self.run(f"list {s.keyword} {family.value} {table} {s.name}", json_output=True))
            except NftError as e:
                if is_not_found(e):
                    continue
                raise
            items += doc.get("nftables", [])
        return listing.counted_elements({"nftables": items})

    def load(self, steps: Iterable[LoadStep]) -> int:
        """Each step's transactions by nft, its element loads as one packed nfnetlink batch (nft's
        parser costs ~11 µs per element, packing ~0.7 µs): both queued on the worker thread, so
        the kernel commits a step (no GIL held) while the caller computes the next."""
        pending: list[Future[None]] = []
        sent = 0
        layouts: dict[tuple[Family, str], Layout | None] = {}
        for step in steps:
            batch = Batch()
            text: list[Transaction] = []  # elements of sets that cannot be packed (intervals)
            for ld in step.loads:
                k = (ld.family, ld.set.name)
                if k not in layouts:
                    layouts[k] = Layout.for_set(ld.set)
                lay = layouts[k]
                if lay is None:
                    tx = Transaction(ld.family, ld.table)
                    tx.add_elements(ld.set.name, bulk.expand(ld))
                    text.append(tx)
                    continue
                try:
                    packed = lay.pack_all(ld.elements)
                    for key, values in ld.spreads:
                        packed += lay.pack_spread(key, values)
                except (OSError, ValueError) as e:  # an element nft would refuse as well
                    raise NftError(f"Error: an element of {ld.set.name} cannot be packed: {e}", errno.EINVAL) from e
                batch.add(ld.family.value, ld.table, ld.set.name, packed)
            pending.append(self.apply_async(*step.txs, *text))
            if batch.count:
                pending.append(self.send_batch_async(batch))
            sent += step.element_changes()
        error: Exception | None = None
        for future in pending:  # in order: the first failure is raised, once all are done
            try:
                future.result()
            except Exception as e:
                error = error or e
        if error is not None:
            raise error
        return sent

    def send_batch(self, batch: Batch) -> None:
        """Commit a netlink element batch (one kernel transaction) in our network namespace."""
        self.send_batch_async(batch).result()

    def send_batch_async(self, batch: Batch) -> Future[None]:
        def go(_: Any) -> None:
            try:
                self._send(batch)
            except OSError as e:
                raise NftError(f"Error: {e.strerror or e}", e.errno or errno.EINVAL) from None

        return self._submit(go)

    def delete(self, family: Family, table: str) -> bool:
        try:
            self.run(f"delete table {family.value} {table}")
        except NftError as e:
            if is_not_found(e):
                return False
            raise
        return True
