"""Watch a namespace's committed nftables changes from the kernel, without ``nft``.

``nft monitor`` (nft 1.0.6) dumps the whole ruleset before it subscribes and again after each
change, so next to a big table it misses events or never becomes ready. This listens on a
NETLINK_NETFILTER socket subscribed to the NFNLGRP_NFTABLES group: the kernel sends one
NFT_MSG_NEWSETELEM notification per added element, after the transaction is committed. The socket
is created inside the namespace (setns of the calling thread only, and back).

    with ElementWatch(netns) as w:
        key = service_key("10.96.0.10", "tcp", 80)
        ... start the proxy ...
        t = w.wait("service-ips", key, timeout=300)   # time.perf_counter() of the notification

Keys are matched as raw bytes: nftables concatenations pad every field to 4 bytes, so
``ipv4 . inet_proto . inet_service`` is 4 + 4 + 4 bytes (:func:`service_key`).

:class:`GenerationWatch` records whole transactions instead: the kernel notifies every object a
transaction committed (NEWTABLE, DELTABLE, NEWCHAIN, NEWRULE, NEWSETELEM, …), then one NEWGEN
message for the transaction itself (its generation id and the committing process), all under its
commit lock, so the messages between two NEWGENs are one transaction's. Which transactions
touched a table, and whether a table was deleted and created again in the same one:

    with GenerationWatch(netns) as g:
        ... the change ...
    gens = g.generations(table="nftproxy")
    [(x.id, x.deleted_tables(), x.created_tables()) for x in gens]
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

__all__ = ["Change", "ElementWatch", "Generation", "GenerationWatch", "service_key"]

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NFNLGRP_NFTABLES = 7
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWSETELEM = 12
NFT_MSG_NEWGEN = 15
NFTA_SET_ELEM_LIST_SET = 2
_NLMSG = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
_NEWSETELEM = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWSETELEM
CLONE_NEWNET = 0x40000000
_PROTO = {"tcp": 6, "udp": 17, "sctp": 132}


def service_key(ip: str, proto: str, port: int) -> bytes:
    """The key bytes of ``ip . proto . port`` in a map like ``service-ips``."""
    addr = ipaddress.ip_address(ip).packed
    return addr + bytes([_PROTO[proto], 0, 0, 0]) + port.to_bytes(2, "big") + b"\0\0"


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _socket_in(netns: str | None) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)


def _messages(buf: bytes) -> Iterator[tuple[int, bytes]]:
    off = 0
    while off + _NLMSG.size <= len(buf):
        length, mtype, _flags, _seq, _pid = _NLMSG.unpack_from(buf, off)
        if length < _NLMSG.size:
            return
        yield mtype, buf[off : off + length]
        off += (length + 3) & ~3


def _set_name(msg: bytes) -> str | None:
    off = _NLMSG.size + 4  # nfgenmsg
    while off + _NLA.size <= len(msg):
        alen, atype = _NLA.unpack_from(msg, off)
        if alen < _NLA.size:
            return None
        if atype & 0x3FFF == NFTA_SET_ELEM_LIST_SET:
            return msg[off + 4 : off + alen].rstrip(b"\0").decode(errors="replace")
        off += (alen + 3) & ~3
    return None


class _Watch:
    """A NETLINK_NETFILTER socket in a namespace, subscribed to the nftables group, read by a
    thread: each chunk received goes to ``_chunk`` (subclasses), with the time it arrived."""

    def __init__(self, netns: str | None, rcvbuf: int = 256 << 20) -> None:
        self.sock = _socket_in(netns)
        with contextlib.suppress(OSError):  # root: past rmem_max, so a big first load is not lost
            self.sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
        self.sock.bind((0, 0))
        self.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
        self.sock.settimeout(0.2)
        self.overruns = 0  # ENOBUFS seen: notifications were lost
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _chunk(self, data: bytes, now: float) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        buf = bytearray(1 << 20)
        while not self._stop:
            try:
                n = self.sock.recv_into(buf)
            except TimeoutError:
                continue
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.overruns += 1
                    continue
                if self._stop:
                    return
                raise
            self._chunk(bytes(buf[:n]), time.perf_counter())

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ElementWatch(_Watch):
    """Records when each awaited (set, key) first appeared in a NEWSETELEM notification."""

    def __init__(self, netns: str | None, rcvbuf: int = 256 << 20) -> None:
        super().__init__(netns, rcvbuf)
        self._wanted: dict[tuple[str, bytes], float | None] = {}
        self._thread.start()

    def expect(self, set_name: str, key: bytes) -> None:
        """Start looking for ``key`` in ``set_name`` (call before the change is made)."""
        with self._cond:
            self._wanted[(set_name, key)] = None

    def wait(self, set_name: str, key: bytes, timeout: float) -> float:
        """perf_counter() time of the notification adding ``key`` to ``set_name``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._wanted.setdefault((set_name, key), None)
            while self._wanted[(set_name, key)] is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no element {key.hex()} added to {set_name} in {timeout:.0f}s")
                self._cond.wait(min(left, 0.5))
            t = self._wanted.pop((set_name, key))
            assert t is not None
            return t

    def _chunk(self, data: bytes, now: float) -> None:
        with self._cond:
            pending = [(s, k) for (s, k), t in self._wanted.items() if t is None and k in data]
        if not pending:
            return
        for mtype, msg in _messages(data):
            if mtype != _NEWSETELEM:
                continue
            name = _set_name(msg)
            for s, k in pending:
                if s == name and k in msg:
                    with self._cond:
                        if self._wanted.get((s, k), 0.0) is None:
                            self._wanted[(s, k)] = now
                            self._cond.notify_all()


# ---------------------------------------------------------------------------------------------- transactions

# nf_tables.h: enum nf_tables_msg_types (the notifications a commit sends)
_KINDS = {
    0: "new-table", 2: "del-table", 3: "new-chain", 5: "del-chain", 6: "new-rule", 8: "del-rule",
    9: "new-set", 11: "del-set", 12: "new-setelem", 14: "del-setelem", 18: "new-obj", 20: "del-obj",
    22: "new-flowtable", 24: "del-flowtable",
}  # fmt: skip
_FAMILIES = {1: "inet", 2: "ip", 3: "arp", 5: "netdev", 7: "bridge", 10: "ip6"}
# NFTA_*_TABLE (a chain's, rule's, set's, element list's, object's table) and NFTA_TABLE_NAME are
# all attribute 1; NEWGEN: NFTA_GEN_ID 1, NFTA_GEN_PROC_PID 2, NFTA_GEN_PROC_NAME 3.
_ATTR_TABLE = 1
_GEN_ID, _GEN_PID, _GEN_PROC = 1, 2, 3
_LAYOUT = re.compile(rb"nftproxy layout (\d+)")


def _attrs(msg: bytes) -> dict[int, bytes]:
    """The top-level attributes of an nfnetlink message (after its nfgenmsg), by type."""
    out: dict[int, bytes] = {}
    off = _NLMSG.size + 4
    while off + _NLA.size <= len(msg):
        alen, atype = _NLA.unpack_from(msg, off)
        if alen < _NLA.size:
            break
        out.setdefault(atype & 0x3FFF, msg[off + _NLA.size : off + alen])
        off += (alen + 3) & ~3
    return out


@dataclass(frozen=True)
class Change:
    """One object a transaction committed: ``kind`` (``new-table``, ``del-table``, ``new-rule``, …)
    in table ``family`` ``table``; ``layout``: the ``nftproxy layout N`` of a new table's comment."""

    kind: str
    family: str
    table: str
    layout: int | None = None


@dataclass
class Generation:
    """One committed transaction: its generation id, the process that committed it, its changes."""

    id: int
    pid: int
    proc: str
    changes: list[Change] = field(default_factory=list)
    at: float = 0.0  # time.monotonic() when its NEWGEN arrived

    def tables(self) -> set[tuple[str, str]]:
        return {(c.family, c.table) for c in self.changes}

    def deleted_tables(self) -> set[tuple[str, str]]:
        return {(c.family, c.table) for c in self.changes if c.kind == "del-table"}

    def created_tables(self) -> dict[tuple[str, str], int | None]:
        """(family, table) -> the layout in its comment, of the tables this transaction created."""
        return {(c.family, c.table): c.layout for c in self.changes if c.kind == "new-table"}

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for c in self.changes:
            counts[c.kind] = counts.get(c.kind, 0) + 1
        what = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        return f"gen {self.id} by {self.proc}[{self.pid}]: {what}"


class GenerationWatch(_Watch):
    """Records every transaction committed in a namespace (see the module's docstring)."""

    def __init__(self, netns: str | None, rcvbuf: int = 256 << 20) -> None:
        super().__init__(netns, rcvbuf)  # overruns: the record is incomplete
        self._gens: list[Generation] = []
        self._pending: list[Change] = []
        self._thread.start()

    def generations(self, table: str | None = None) -> list[Generation]:
        """The transactions committed so far (those that changed TABLE, of any family)."""
        with self._cond:
            gens = list(self._gens)
        return [g for g in gens if table is None or any(t == table for _, t in g.tables())]

    def wait(self, count: int, timeout: float, table: str | None = None) -> list[Generation]:
        """Wait until COUNT transactions (that changed TABLE) were seen; return them all."""
        deadline = time.monotonic() + timeout
        while len(gens := self.generations(table)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(gens)} of {count} transactions seen in {timeout:.0f}s")
            with self._cond:
                self._cond.wait(0.1)
        return gens

    def _chunk(self, data: bytes, now: float) -> None:
        for mtype, msg in _messages(data):
            if mtype >> 8 != NFNL_SUBSYS_NFTABLES or len(msg) < _NLMSG.size + 4:
                continue
            self._message(mtype & 0xFF, msg)

    def _message(self, kind: int, msg: bytes) -> None:
        attrs = _attrs(msg)
        if kind == NFT_MSG_NEWGEN:

            def u32(a: int) -> int:
                v = attrs.get(a, b"")
                return int.from_bytes(v[:4], "big") if len(v) >= 4 else -1

            proc = attrs.get(_GEN_PROC, b"").rstrip(b"\0").decode(errors="replace")
            gen = Generation(u32(_GEN_ID), u32(_GEN_PID), proc, self._pending, time.monotonic())
            self._pending = []
            with self._cond:
                self._gens.append(gen)
                self._cond.notify_all()
            return
        name = _KINDS.get(kind)
        if name is None:
            return
        family = _FAMILIES.get(msg[_NLMSG.size], str(msg[_NLMSG.size]))
        table = attrs.get(_ATTR_TABLE, b"").rstrip(b"\0").decode(errors="replace")
        layout = None
        if name == "new-table" and (m := _LAYOUT.search(msg)):
            layout = int(m.group(1))
        self._pending.append(Change(name, family, table, layout))
