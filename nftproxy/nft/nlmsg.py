"""Netlink framing, written once: message headers (nlmsghdr, nfgenmsg), attributes (packed and
read back), nfnetlink batches (begin, end), acks, and the netlink socket. Used by the nftables
element batches (netlink.py), ctnetlink (conntrack.py) and rtnetlink (addresses.py)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator

NETLINK_ROUTE, NETLINK_NETFILTER = 0, 12
NLMSG = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence number, port id
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK, NLM_F_DUMP, NLM_F_CREATE = 0x1, 0x2, 0x4, 0x300, 0x400
NLA = struct.Struct("=HH")  # nlattr (and rtattr): length, type
NLA_F_NESTED, NLA_TYPE_MASK = 0x8000, 0x3FFF
NFGEN = struct.Struct("=BBH")  # nfgenmsg: family, version, resource id (big-endian)
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33


# ------------------------------------------------------------------------------ packing


def nla(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = NLA.size + len(payload)
    return NLA.pack(length, kind) + payload + b"\0" * (-length % 4)


def nested(kind: int, payload: bytes) -> bytes:
    return nla(kind | NLA_F_NESTED, payload)


def nfnl_message(kind: int, flags: int, seq: int, family: int, body: bytes = b"", res_id: int = 0) -> bytes:
    """An nfnetlink message: nlmsghdr, nfgenmsg (``kind`` is subsystem << 8 | message type)."""
    payload = NFGEN.pack(family, 0, socket.htons(res_id)) + body
    return NLMSG.pack(NLMSG.size + len(payload), kind, flags, seq, 0) + payload


def batch(subsystem: int, messages: Iterable[tuple[int, int, int, bytes]]) -> tuple[bytes, int]:
    """``messages`` (kind, flags, family, body) between a batch begin and end of ``subsystem``:
    one kernel transaction. Returns the bytes and how many messages they carry."""
    seq = 1
    parts = [nfnl_message(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, res_id=subsystem)]
    for kind, flags, family, body in messages:
        seq += 1
        parts.append(nfnl_message(kind, flags, seq, family, body))
    seq += 1
    parts.append(nfnl_message(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, res_id=subsystem))
    return b"".join(parts), seq - 2


# ------------------------------------------------------------------------------ reading


def messages(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(type, sequence number, offset, length) of each netlink message in one received chunk (the
    one walk of nlmsghdr chains: batch acks, address dumps, conntrack dumps and acks)."""
    off = 0
    while off + NLMSG.size <= len(data):
        length, kind, _flags, seq, _pid = NLMSG.unpack_from(data, off)
        if length < NLMSG.size:
            return
        yield kind, seq, off, length
        off += (length + 3) & ~3


def error_code(data: bytes, off: int) -> int:
    """The error of the NLMSG_ERROR message at ``off``: 0 (an ack) or a negative errno."""
    return int(struct.unpack_from("=i", data, off + NLMSG.size)[0])


def acks(data: bytes) -> Iterator[tuple[int, int]]:
    """(sequence number, error: 0 or a negative errno) of each NLMSG_ERROR in ``data``."""
    for kind, seq, off, _length in messages(data):
        if kind == NLMSG_ERROR:
            yield seq, error_code(data, off)


def attrs(data: bytes | memoryview, off: int, end: int) -> dict[int, memoryview]:
    """The attributes from ``off`` to ``end``, by type (flags masked off)."""
    out: dict[int, memoryview] = {}
    view = memoryview(data)
    while off + NLA.size <= end:
        length, kind = NLA.unpack_from(data, off)
        if length < NLA.size:
            break
        out[kind & NLA_TYPE_MASK] = view[off + NLA.size : off + length]
        off += (length + 3) & ~3
    return out


# ------------------------------------------------------------------------------ the socket


def open_socket(protocol: int, rcvbuf: int = 16 << 20, sndbuf: int | None = None) -> socket.socket:
    """A netlink socket of ``protocol`` in the calling thread's network namespace, bound, with a
    30 s timeout. The buffer sizes are forced where the process may (CAP_NET_ADMIN); without it,
    the first request fails with the clearer error."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
    try:
        try:
            if sndbuf is not None:
                s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, sndbuf)
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        except PermissionError:
            pass
        s.bind((0, 0))
        s.settimeout(30)
    except OSError:
        s.close()
        raise
    return s
