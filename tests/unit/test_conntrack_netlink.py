"""ctnetlink messages of nftproxy/nft/conntrack.py (framed by nft/nlmsg.py), packed and parsed
without a kernel (the real kernel: tests/netns/test_udp_conntrack.py)."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from nftproxy.nft import conntrack as ct
from nftproxy.nft import nlmsg
from nftproxy.nft.conntrack import Entry, Tuple
from nftproxy.nft.objects import Family, UdpFlow

V4 = Entry(
    Tuple("10.244.0.5", "10.96.4.53", 17, 40053, 53), Tuple("10.244.0.3", "10.244.0.5", 17, 5353, 40053), 0, 7, 0x1A8
)
V6 = Entry(
    Tuple("fd00::5", "fd00:96::53", 17, 40053, 53), Tuple("fd00::3", "fd00::5", 17, 5353, 40053), 3, 0xDEADBEEF, 0x1A8
)


def new_message(family: int, e: Entry, seq: int = 1) -> bytes:
    """A dump's IPCTNL_MSG_CT_NEW as the kernel sends it (with attributes we skip)."""
    body = nlmsg.nla(ct.CTA_TUPLE_ORIG | nlmsg.NLA_F_NESTED, ct.pack_tuple(family, e.orig))
    body += nlmsg.nla(ct.CTA_TUPLE_REPLY | nlmsg.NLA_F_NESTED, ct.pack_tuple(family, e.reply))
    body += nlmsg.nla(ct.CTA_STATUS, struct.pack(">I", e.status))
    body += nlmsg.nla(7, struct.pack(">I", 29))  # CTA_TIMEOUT
    if e.zone:
        body += nlmsg.nla(ct.CTA_ZONE, struct.pack(">H", e.zone))
    if e.id is not None:
        body += nlmsg.nla(ct.CTA_ID, struct.pack(">I", e.id))
    return ct._message(ct.IPCTNL_MSG_CT_NEW, nlmsg.NLM_F_MULTI, seq, family, body)


def control(kind: int, seq: int, err: int = 0) -> bytes:
    return (
        struct.pack("=IHHII", 20 + (16 if kind == nlmsg.NLMSG_ERROR else 0), kind, 0, seq, 0)
        + struct.pack("=i", err)
        + (b"\0" * 16 if kind == nlmsg.NLMSG_ERROR else b"")
    )


def test_the_dump_request_is_a_ctnetlink_get_of_one_family() -> None:
    msg = ct.dump_request(socket.AF_INET6, seq=9)
    length, kind, flags, seq, pid = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq, pid) == (len(msg), (1 << 8) | 1, 0x301, 9, 0)
    assert msg[16:] == bytes((socket.AF_INET6, 0, 0, 0))


@pytest.mark.parametrize(("family", "entry"), [(socket.AF_INET, V4), (socket.AF_INET6, V6)], ids=["ipv4", "ipv6"])
def test_a_dumped_entry_is_parsed_back(family: int, entry: Entry) -> None:
    data = new_message(family, entry) + new_message(family, entry._replace(id=8), 2)
    assert ct.parse(data) == ([entry, entry._replace(id=8)], False)
    assert ct.parse(data + control(nlmsg.NLMSG_DONE, 3)) == ([entry, entry._replace(id=8)], True)
    assert entry.dnat
    assert entry.flow == UdpFlow(entry.orig.dst, "53", entry.reply.src, str(entry.reply.sport))


def test_the_tuple_attributes_are_nested_and_big_endian() -> None:
    packed = ct.pack_tuple(socket.AF_INET, V4.orig)
    ip_len, ip_kind = struct.unpack_from("=HH", packed)
    assert ip_kind == ct.CTA_TUPLE_IP | nlmsg.NLA_F_NESTED and ip_len == 4 + 2 * 8
    assert packed[4:20] == nlmsg.nla(1, bytes([10, 244, 0, 5])) + nlmsg.nla(2, bytes([10, 96, 4, 53]))
    proto = packed[20:]
    assert struct.unpack_from("=HH", proto)[1] == ct.CTA_TUPLE_PROTO | nlmsg.NLA_F_NESTED
    assert proto[4:] == nlmsg.nla(1, b"\x11") + nlmsg.nla(2, b"\x9c\x75") + nlmsg.nla(3, b"\x00\x35")


def test_a_delete_names_the_original_tuple_zone_and_id() -> None:
    msg = ct.delete_request(socket.AF_INET6, V6, seq=5)
    length, kind, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (length, kind, flags, seq) == (len(msg), (1 << 8) | 2, 0x5, 5)
    attrs = nlmsg.attrs(msg, 20, len(msg))
    assert sorted(attrs) == [ct.CTA_TUPLE_ORIG, ct.CTA_ID, ct.CTA_ZONE]
    assert bytes(attrs[ct.CTA_TUPLE_ORIG]) == ct.pack_tuple(socket.AF_INET6, V6.orig)
    assert bytes(attrs[ct.CTA_ZONE]) == b"\x00\x03" and bytes(attrs[ct.CTA_ID]) == b"\xde\xad\xbe\xef"
    v4 = ct.delete_request(socket.AF_INET, V4, 1)
    assert ct.CTA_ZONE not in nlmsg.attrs(v4, 20, len(v4))  # zone 0: left out


def test_not_dnated_is_not_a_udp_flow() -> None:
    plain = V4._replace(reply=Tuple("10.96.4.53", "10.244.0.5", 17, 53, 40053))
    assert not plain.dnat


def test_a_refused_dump_raises_with_the_errno() -> None:
    with pytest.raises(OSError, match=r"listing conntrack entries.*EPERM") as e:
        ct.parse(control(nlmsg.NLMSG_ERROR, 1, -errno.EPERM))
    assert e.value.errno == errno.EPERM


class FakeSocket:
    """Answers each send with one ack per message: an error for the ids in ``errors``."""

    def __init__(self, errors: dict[int, int]) -> None:
        self.errors = errors
        self.sends: list[bytes] = []
        self.pending: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sends.append(data)
        off = 0
        acks: list[bytes] = []
        while off < len(data):
            length, _kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
            ident = struct.unpack(">I", bytes(nlmsg.attrs(data, off + 20, off + length)[ct.CTA_ID]))[0]
            acks.append(control(nlmsg.NLMSG_ERROR, seq, self.errors.get(ident, 0)))
            off += length
        half = len(acks) // 2  # the acks over two reads (each read: whole messages)
        self.pending = [b"".join(acks[:half]), b"".join(acks[half:])]
        return len(data)

    def recv(self, _size: int) -> bytes:
        return self.pending.pop(0)


def test_deletes_are_batched_and_gone_entries_are_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ct, "PER_SEND", 4)
    doomed = [V4._replace(id=i) for i in range(10)]
    sock = FakeSocket({3: -errno.ENOENT, 8: -errno.ENOENT})
    assert ct.delete_entries(Family.IP, doomed, sock) == (8, 2)  # type: ignore[arg-type]
    assert len(sock.sends) == 3  # 4 + 4 + 2 messages


def test_other_refusals_are_raised_after_every_delete_was_sent() -> None:
    doomed = [V4._replace(id=i) for i in range(5)]
    sock = FakeSocket({1: -errno.EPERM, 2: -errno.EPERM, 4: -errno.ENOENT})
    with pytest.raises(OSError, match=r"deleting 2 of 5 conntrack entries.*EPERM") as e:
        ct.delete_entries(Family.IP, doomed, sock)  # type: ignore[arg-type]
    assert e.value.errno == errno.EPERM
    assert len(sock.sends) == 1
