"""The libnftables backend: applies a Transaction as one kernel transaction, reads tables back."""

from __future__ import annotations

import errno
import json
import logging
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from nftproxy.nft import bulk, located, netlink
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.backend import NftError, invalid, is_not_found
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.netlink import FAMILIES, Batch, Layout
from nftproxy.nft.objects import Chain, Counter, DynamicElement, Element, Family, Key, Set, Table
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
        m = _TABLE_COMMENT.search(terse)
        return table_from_json(json.loads(out), family, table, m.group(1) if m else "")

    def chain_rules(self, family: Family, table: str) -> dict[str, tuple[str, ...]] | None:
        try:
            listing = self.run(f"list table {family.value} {table}", terse=True)
        except NftError as e:
            if is_not_found(e):
                return None
            raise
        return parse_rules(listing)

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
        names = {
            item["chain"]["name"]
            for item in doc.get("nftables", [])
            if "chain" in item and item["chain"].get("table") == table
        }
        return names or None

    def read_dynamic(self, family: Family, table: str, set_name: str) -> list[DynamicElement]:
        doc = json.loads(self.run(f"list map {family.value} {table} {set_name}", json_output=True))
        out = []
        for item in doc.get("nftables", []):
            obj = item.get("map")
            if obj:
                default = int(obj.get("timeout", 0))
                protos = _proto_fields(obj.get("type"))
                for raw in obj.get("elem", []):
                    key = raw[0]["elem"] if isinstance(raw[0], dict) and "elem" in raw[0] else {"val": raw[0]}
                    parts = _proto_names(_parts(key["val"]), protos)
                    out.append(DynamicElement(parts, _parts(raw[1]), int(key.get("timeout", default))))
        return out

    def counter_packets(self, family: Family, table: str) -> dict[str, int]:
        try:
            doc = json.loads(self.run(f"list counters table {family.value} {table}", json_output=True))
        except NftError as e:
            if is_not_found(e):
                return {}
            raise
        return {
            c["name"]: int(c.get("packets", 0))
            for item in doc.get("nftables", [])
            if (c := item.get("counter")) and c.get("table") == table
        }

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


_CHAIN = re.compile(r"^\s*chain (\S+) \{\s*$")
_SKIP = re.compile(r"^\s*(type |comment |policy |counter$|\}|$)")
_SET = re.compile(r"^(set|map) \S+ \{")


def parse_rules(listing: str) -> dict[str, tuple[str, ...]]:
    """Chain name -> rules from `nft -t list table …` (terse: no set elements)."""
    chains: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        m = _CHAIN.match(line)
        if m:
            current = chains.setdefault(m.group(1), [])
            continue
        stripped = line.strip()
        if current is None:
            continue
        if stripped == "}":
            current = None
            continue
        if _SKIP.match(line) or _SET.match(stripped):
            continue
        current.append(stripped)
    return {name: tuple(rules) for name, rules in chains.items()}


_TABLE_COMMENT = re.compile(r'^table [^\n]*\{\n\s*comment "([^"]*)"', re.M)


def table_from_json(doc: dict[str, Any], family: Family, name: str, comment: str) -> Table:
    """Build an adopted Table (names, comment, elements) from `nft -j list table`."""
    chains: dict[str, Chain] = {}
    sets: dict[str, Set] = {}
    counters: dict[str, Counter] = {}
    elements: dict[str, dict[Key, Element]] = {}
    for item in doc.get("nftables", []):
        if "chain" in item:
            chains[item["chain"]["name"]] = Chain(item["chain"]["name"])
        elif "counter" in item:
            counters[item["counter"]["name"]] = Counter(item["counter"]["name"])
        elif "set" in item or "map" in item:
            is_map = "map" in item
            obj = item["map"] if is_map else item["set"]
            sname = obj["name"]
            sets[sname] = Set(sname, spec="type ? : ?" if is_map else "type ?")
            els: dict[Key, Element] = {}
            protos = _proto_fields(obj.get("type"))
            for raw in obj.get("elem", []):
                e = _element(raw, is_map)
                if protos:
                    e = e._replace(key=_proto_names(e.key, protos))
                els[e.key] = e
            elements[sname] = els
    return Table(family, name, comment, chains, sets, elements, adopted=True, counters=counters)


# nft prints a protocol by its /etc/protocols name, and by number where that file is missing (a
# minimal container image): read back, numbers are named as the compiler names them, or every
# full sync would see every map element as changed.
_PROTO_NAMES = {"6": "tcp", "17": "udp", "132": "sctp", "1": "icmp", "58": "ipv6-icmp"}


def _proto_fields(types: Any) -> tuple[int, ...]:
    """The key's protocol fields, from the set's JSON "type": datatype names (nft 1.0.6, also for
    typeof sets), or ``{"typeof": expression}`` (nft >= 1.1 for typeof sets: ``meta l4proto``)."""
    if isinstance(types, dict) and "typeof" in types:
        expr = types["typeof"]
        parts = expr["concat"] if isinstance(expr, dict) and "concat" in expr else [expr]
        return tuple(i for i, p in enumerate(parts) if p == {"meta": {"key": "l4proto"}})
    types = [types] if isinstance(types, str) else types or []
    return tuple(i for i, t in enumerate(types) if t == "inet_proto")


def _proto_names(key: Key, fields: tuple[int, ...]) -> Key:
    return tuple(_PROTO_NAMES.get(part, part) if i in fields else part for i, part in enumerate(key))


def _element(raw: Any, is_map: bool) -> Element:
    key_raw, val_raw = (raw[0], raw[1]) if is_map else (raw, None)
    comment = None
    if isinstance(key_raw, dict) and "elem" in key_raw:
        comment = key_raw["elem"].get("comment")
        key_raw = key_raw["elem"]["val"]
    value = None if val_raw is None else _parts(val_raw)
    return Element(_parts(key_raw), value, comment)


_VERDICTS = ("accept", "drop", "continue", "return")


def _parts(x: Any) -> tuple[str, ...]:
    if isinstance(x, dict) and "concat" in x:
        return tuple(_atom(p) for p in x["concat"])
    return (_atom(x),)


def _atom(x: Any) -> str:
    if isinstance(x, str | int):
        return str(x)
    if isinstance(x, dict):
        if "prefix" in x:
            return f"{x['prefix']['addr']}/{x['prefix']['len']}"
        if "range" in x:
            return f"{x['range'][0]}-{x['range'][1]}"
        for verdict in ("goto", "jump"):
            if verdict in x:
                return f"{verdict} {x[verdict]['target']}"
        for verdict in _VERDICTS:
            if verdict in x:
                return verdict
    raise ValueError(f"unexpected element part in nft JSON: {x!r}")
