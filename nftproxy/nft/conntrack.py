"""Conntrack apart from nftables, as kube-proxy's pkg/proxy/conntrack: the ``Conntrack`` interface
(list the DNATed UDP flows, delete flows), ``KernelConntrack`` (its network namespace's table),
and its fake (``nft/fake.FakeConntrack``). The dataplane gets it as a dependency of its own.

UDP conntrack entries over ctnetlink (NETLINK_NETFILTER, subsystem NFNL_SUBSYS_CTNETLINK), in
the calling thread's network namespace: listing the DNATed ones, deleting some. No `conntrack`
process: as kube-proxy (pkg/proxy/conntrack over vishvananda/netlink), inside the process.

* Listing: one IPCTNL_MSG_CT_GET dump of the family (``nfgen_family``; the kernel filters by it),
  whose entries are parsed here and kept when UDP and DNATed (the reply comes from another
  address than the one the client sent to, as the old ``conntrack -L`` parsing did).
* Deleting: a ``UdpFlow`` (frontend address and port, endpoint address) stands for every entry
  of that frontend DNATed to that endpoint, as ``conntrack -D --orig-dst --orig-port-dst
  --reply-src`` did: the family is dumped again and each matching entry is deleted by its
  original tuple, zone and id (IPCTNL_MSG_CT_DELETE), many messages per ``send``, each acked.
  An entry already gone (ENOENT: it expired, or its id changed because a new flow took the
  tuple) is not an error; any other refusal (EPERM, …) is raised once all are sent.

Message layout (linux/netfilter/nfnetlink_conntrack.h): nlmsghdr, nfgenmsg (family, version 0,
res_id 0), then attributes; tuples are nested (NLA_F_NESTED) ``CTA_TUPLE_IP`` (addresses) and
``CTA_TUPLE_PROTO`` (number, ports in network order)."""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from nftproxy.nft import netns as netns_mod
from nftproxy.nft import nlmsg
from nftproxy.nft.nlmsg import (
    NFGEN,
    NLA_F_NESTED,
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG,
    NLMSG_DONE,
    NLMSG_ERROR,
    acks,
    attrs,
    error_code,
    messages,
    nla,
)
from nftproxy.nft.objects import Family, UdpFlow

NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 0, 1, 2
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_STATUS, CTA_ID, CTA_ZONE = 1, 2, 3, 12, 18
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
IPPROTO_UDP = 17
IPS_DST_NAT = 1 << 5  # CTA_STATUS bit (linux/netfilter/nf_conntrack_common.h)
PER_SEND = 512  # delete messages per send (~100 bytes each; their acks must fit the receive buffer)

_AF = {Family.IP: socket.AF_INET, Family.IP6: socket.AF_INET6}
_HEAD = NLMSG.size + NFGEN.size


class Tuple(NamedTuple):
    """One direction of a conntrack entry (addresses as text, ports as numbers)."""

    src: str
    dst: str
    proto: int
    sport: int
    dport: int


class Entry(NamedTuple):
    """A conntrack entry as the dump gives it: enough to delete exactly this one."""

    orig: Tuple
    reply: Tuple
    zone: int = 0
    id: int | None = None
    status: int = 0

    @property
    def dnat(self) -> bool:
        """Its replies come from another address than the client sent to."""
        return self.reply.src != self.orig.dst

    @property
    def flow(self) -> UdpFlow:
        return UdpFlow(self.orig.dst, str(self.orig.dport), self.reply.src, str(self.reply.sport))


# ------------------------------------------------------------------------------ packing


def _message(kind: int, flags: int, seq: int, family: int, body: bytes = b"") -> bytes:
    return nlmsg.nfnl_message((NFNL_SUBSYS_CTNETLINK << 8) | kind, flags, seq, family, body)


def dump_request(family: int, seq: int = 1) -> bytes:
    """IPCTNL_MSG_CT_GET | NLM_F_DUMP: every entry of ``family`` (AF_INET, AF_INET6)."""
    return _message(IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, family)


def pack_tuple(family: int, t: Tuple) -> bytes:
    """The nested CTA_TUPLE_IP and CTA_TUPLE_PROTO of a tuple (the outer attribute not included)."""
    src, dst = (CTA_IP_V4_SRC, CTA_IP_V4_DST) if family == socket.AF_INET else (CTA_IP_V6_SRC, CTA_IP_V6_DST)
    ip = nla(src, socket.inet_pton(family, t.src)) + nla(dst, socket.inet_pton(family, t.dst))
    proto = nla(CTA_PROTO_NUM, bytes((t.proto,)))
    proto += nla(CTA_PROTO_SRC_PORT, struct.pack(">H", t.sport)) + nla(CTA_PROTO_DST_PORT, struct.pack(">H", t.dport))
    return nla(CTA_TUPLE_IP | NLA_F_NESTED, ip) + nla(CTA_TUPLE_PROTO | NLA_F_NESTED, proto)


def delete_request(family: int, e: Entry, seq: int) -> bytes:
    """IPCTNL_MSG_CT_DELETE of one entry by its original tuple; with its id, a newer entry that
    took the same tuple meanwhile is left alone (ENOENT)."""
    body = nla(CTA_TUPLE_ORIG | NLA_F_NESTED, pack_tuple(family, e.orig))
    if e.zone:
        body += nla(CTA_ZONE, struct.pack(">H", e.zone))
    if e.id is not None:
        body += nla(CTA_ID, struct.pack(">I", e.id))
    return _message(IPCTNL_MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, family, body)


# ------------------------------------------------------------------------------ parsing


def _tuple(family: int, raw: memoryview) -> Tuple | None:
    t = attrs(raw, 0, len(raw))
    ip, proto = t.get(CTA_TUPLE_IP), t.get(CTA_TUPLE_PROTO)
    if ip is None or proto is None:
        return None
    a, p = attrs(ip, 0, len(ip)), attrs(proto, 0, len(proto))
    src, dst = (CTA_IP_V4_SRC, CTA_IP_V4_DST) if family == socket.AF_INET else (CTA_IP_V6_SRC, CTA_IP_V6_DST)
    if src not in a or dst not in a or CTA_PROTO_NUM not in p:
        return None
    sport, dport = p.get(CTA_PROTO_SRC_PORT), p.get(CTA_PROTO_DST_PORT)
    return Tuple(
        socket.inet_ntop(family, bytes(a[src])),
        socket.inet_ntop(family, bytes(a[dst])),
        p[CTA_PROTO_NUM][0],
        struct.unpack(">H", sport)[0] if sport is not None and len(sport) >= 2 else 0,
        struct.unpack(">H", dport)[0] if dport is not None and len(dport) >= 2 else 0,
    )


def parse_entry(data: bytes, off: int, length: int) -> Entry | None:
    """The entry of one IPCTNL_MSG_CT_NEW message at ``off`` (None: not an IP entry we can read)."""
    family = data[off + NLMSG.size]
    if family not in (socket.AF_INET, socket.AF_INET6):
        return None
    a = attrs(data, off + _HEAD, off + length)
    orig = _tuple(family, a[CTA_TUPLE_ORIG]) if CTA_TUPLE_ORIG in a else None
    reply = _tuple(family, a[CTA_TUPLE_REPLY]) if CTA_TUPLE_REPLY in a else None
    if orig is None or reply is None:
        return None
    zone = struct.unpack(">H", a[CTA_ZONE][:2])[0] if CTA_ZONE in a else 0
    ident = struct.unpack(">I", a[CTA_ID][:4])[0] if CTA_ID in a else None
    status = struct.unpack(">I", a[CTA_STATUS][:4])[0] if CTA_STATUS in a else 0
    return Entry(orig, reply, zone, ident, status)


def parse(data: bytes) -> tuple[list[Entry], bool]:
    """The entries in one chunk of a dump, and whether the dump ended in it. A refused dump
    (an NLMSG_ERROR with an error) raises OSError."""
    out: list[Entry] = []
    for kind, _seq, off, length in messages(data):
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            _raise(error_code(data, off), "listing conntrack entries")
            return out, True
        if kind == (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW:
            e = parse_entry(data, off, length)
            if e is not None:
                out.append(e)
    return out, False


def _raise(err: int, what: str) -> None:
    if err:
        raise OSError(-err, f"{what}: ctnetlink: {os.strerror(-err)} ({errno.errorcode.get(-err, err)})")


# ------------------------------------------------------------------------------ the kernel


def _socket() -> socket.socket:
    return nlmsg.open_socket(nlmsg.NETLINK_NETFILTER, rcvbuf=16 << 20, sndbuf=4 << 20)


def entries(family: Family, sock: socket.socket | None = None) -> list[Entry]:
    """Every conntrack entry of ``family`` in this network namespace."""
    own = sock is None
    s = _socket() if sock is None else sock
    try:
        s.send(dump_request(_AF[family]))
        out: list[Entry] = []
        while True:
            got, done = parse(s.recv(1 << 20))
            out += got
            if done:
                return out
    finally:
        if own:
            s.close()


def udp_entries(family: Family, sock: socket.socket | None = None) -> list[Entry]:
    """The DNATed UDP entries of ``family``."""
    return [e for e in entries(family, sock) if e.orig.proto == IPPROTO_UDP and e.dnat]


def udp_flows(family: Family) -> list[UdpFlow]:
    """The DNATed UDP entries as (frontend, port, endpoint): one per entry."""
    return [e.flow for e in udp_entries(family)]


def delete_entries(family: Family, doomed: Iterable[Entry], sock: socket.socket | None = None) -> tuple[int, int]:
    """Delete these entries (batched sends, every message acked). Returns (deleted, already
    gone); any other refusal is raised after the last message (the first one, and how many)."""
    af = _AF[family]
    own = sock is None
    s = _socket() if sock is None else sock
    deleted = gone = 0
    errors: list[int] = []
    try:
        todo = list(doomed)
        for i in range(0, len(todo), PER_SEND):
            chunk = todo[i : i + PER_SEND]
            s.send(b"".join(delete_request(af, e, seq) for seq, e in enumerate(chunk, 1)))
            waiting = len(chunk)
            while waiting:
                for _seq, err in acks(s.recv(1 << 20)):
                    waiting -= 1
                    if not err:
                        deleted += 1
                    elif err == -errno.ENOENT:
                        gone += 1
                    else:
                        errors.append(err)
    finally:
        if own:
            s.close()
    if errors:
        _raise(errors[0], f"deleting {len(errors)} of {len(todo)} conntrack entries")
    return deleted, gone


def delete_udp_flows(family: Family, flows: Iterable[UdpFlow], listed: Iterable[Entry] | None = None) -> int:
    """Delete every DNATed UDP entry of these (frontend, port, endpoint) flows; returns how many
    entries were deleted. ``listed``: the entries of a dump made after the ruleset changed (a
    stale flow's entries all exist by then: no new one can be DNATed to an endpoint that left the
    maps), so that no second dump is needed; without it, or when it lacks one of ``flows``, the
    family is dumped here."""
    wanted = set(flows)
    if not wanted:
        return 0
    loose = {f for f in wanted if not f.reply_sport}  # judged by the endpoint's address alone

    def match(e: Entry) -> UdpFlow | None:
        f = e.flow
        if f in wanted:
            return f
        f = f._replace(reply_sport="")
        return f if f in loose else None

    with _socket() as s:
        have = None if listed is None else list(listed)
        if have is None or not wanted <= {match(e) for e in have}:
            have = udp_entries(family, s)
        doomed = [e for e in have if match(e) is not None]
        return delete_entries(family, doomed, s)[0] if doomed else 0


# ------------------------------------------------------------------------------ the interface


class Conntrack(Protocol):
    """What the dataplane needs of conntrack (kube-proxy's conntrack.Interface)."""

    def udp_flows(self, family: Family) -> list[UdpFlow]:
        """The DNATed UDP entries of ``family``, one flow each (frontend, port, endpoint)."""

    def delete_udp_flows(self, family: Family, flows: Iterable[UdpFlow]) -> int:
        """Delete every DNATed UDP entry of these flows; return how many entries went."""


class KernelConntrack:
    """The conntrack table of network namespace ``netns`` (None: this one), over ctnetlink, from
    a worker thread of its own that entered it."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._worker = netns_mod.Worker(netns, "conntrack")
        self._listed: dict[Family, list[Entry]] = {}  # the last udp_flows, per family

    def close(self) -> None:
        self._worker.close()

    def udp_flows(self, family: Family) -> list[UdpFlow]:
        def go() -> list[UdpFlow]:
            entries = udp_entries(family)
            self._listed[family] = entries  # for the delete that follows: no second dump
            return [e.flow for e in entries]

        return self._worker.call(go)

    def delete_udp_flows(self, family: Family, flows: Iterable[UdpFlow]) -> int:
        todo = sorted(set(flows))
        listed = self._listed.pop(family, None)
        if not todo:
            return 0
        return self._worker.call(lambda: delete_udp_flows(family, todo, listed))
