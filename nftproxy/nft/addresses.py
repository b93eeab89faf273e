"""The addresses of a network namespace's interfaces (rtnetlink RTM_GETADDR), as kube-proxy's
``net.InterfaceAddrs``: what a ``--nodeport-addresses`` CIDR is matched against."""

from __future__ import annotations

import errno
import socket
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address

from nftproxy.nft import netns as netns_mod
from nftproxy.nft.netlink import NLMSG, NLMSG_DONE, NLMSG_ERROR, error_code, messages

NETLINK_ROUTE = 0
RTM_NEWADDR, RTM_GETADDR = 20, 22
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
IFA_ADDRESS, IFA_LOCAL = 1, 2
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg
_RTA = struct.Struct("=HH")
IPAddress = IPv4Address | IPv6Address


def _socket(netns: str | None) -> socket.socket:
    """A rtnetlink socket opened inside ``netns`` (a socket keeps the namespace it was made in)."""
    return netns_mod.call_in(
        netns, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE), "netns-rtnetlink"
    )


def parse(data: bytes) -> tuple[list[IPAddress], bool]:
    """The addresses in a chunk of RTM_NEWADDR messages, and whether the dump ended in it."""
    out: list[IPAddress] = []
    for kind, _seq, off, length in messages(data):
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            if err := error_code(data, off):
                raise OSError(-err, f"RTM_GETADDR: {errno.errorcode.get(-err, err)}")
            return out, True
        if kind == RTM_NEWADDR:
            family = data[off + NLMSG.size]
            attrs: dict[int, bytes] = {}
            a = off + NLMSG.size + _IFADDR.size
            end = off + length
            while a + _RTA.size <= end:
                alen, atype = _RTA.unpack_from(data, a)
                if alen < _RTA.size:
                    break
                attrs[atype] = data[a + _RTA.size : a + alen]
                a += (alen + 3) & ~3
            raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)  # IFA_LOCAL: the own end of a p-t-p link
            if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                out.append(ip_address(raw))
    return out, False


class LocalAddresses:
    """Dumps the namespace's addresses on demand through one rtnetlink socket."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self.sock: socket.socket | None = None
        self.seq = 0

    def list(self) -> list[IPAddress]:
        if self.sock is None:
            self.sock = _socket(self.netns)
        self.seq += 1
        req = NLMSG.pack(NLMSG.size + _IFADDR.size, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
        self.sock.send(req + _IFADDR.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        out: list[IPAddress] = []
        while True:
            got, done = parse(self.sock.recv(65536))
            out += got
            if done:
                return out

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
