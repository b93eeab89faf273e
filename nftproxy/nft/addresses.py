"""The addresses of a network namespace's interfaces (rtnetlink RTM_GETADDR), as kube-proxy's
``net.InterfaceAddrs``: what a ``--nodeport-addresses`` CIDR is matched against."""

from __future__ import annotations

import errno
import socket
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address

from nftproxy.nft import netns as netns_mod
from nftproxy.nft.nlmsg import (
    NETLINK_ROUTE,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG,
    NLMSG_DONE,
    NLMSG_ERROR,
    attrs,
    error_code,
    messages,
)

RTM_NEWADDR, RTM_GETADDR = 20, 22
IFA_ADDRESS, IFA_LOCAL = 1, 2
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg
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
            found = attrs(data, off + NLMSG.size + _IFADDR.size, off + length)  # rtattr: as nlattr
            raw = found.get(IFA_LOCAL) or found.get(IFA_ADDRESS)  # IFA_LOCAL: the own end of a p-t-p link
            if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                out.append(ip_address(bytes(raw)))
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
