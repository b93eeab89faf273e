"""Watch a namespace's committed nftables element additions from the kernel, without ``nft``.

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
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from types import TracebackType

__all__ = ["ElementWatch", "service_key"]

NETLINK_NETFILTER = 12
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NFNLGRP_NFTABLES = 7
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWSETELEM = 12
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


class ElementWatch:
    """Records when each awaited (set, key) first appeared in a NEWSETELEM notification."""

    def __init__(self, netns: str | None, rcvbuf: int = 256 << 20) -> None:
        self.sock = _socket_in(netns)
        with contextlib.suppress(OSError):  # root: past rmem_max, so a big first load is not lost
            self.sock.setsockopt(socket.SOL_SOCKET, 33, rcvbuf)  # SO_RCVBUFFORCE
        self.sock.bind((0, 0))
        self.sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
        self.sock.settimeout(0.2)
        self.overruns = 0  # ENOBUFS seen: notifications were lost
        self._wanted: dict[tuple[str, bytes], float | None] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
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
            now = time.perf_counter()
            data = bytes(buf[:n])
            with self._cond:
                pending = [(s, k) for (s, k), t in self._wanted.items() if t is None and k in data]
            if not pending:
                continue
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

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> ElementWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
