"""Listening sockets in the programmed network namespace, with the standard library alone (bound
at start, before the first sync: ``boot``)."""

from __future__ import annotations

import errno
import socket

from nftproxy.nft import netns as netns_mod


class ListenError(OSError):
    """A server of ours cannot listen (``--bind-address-hard-fail``: the start fails)."""


def listening_socket(host: str, port: int, netns: str | None, v6only: bool = False) -> socket.socket:
    """A listening TCP socket created inside ``netns`` (a socket keeps its namespace). On "::",
    both families unless ``v6only``."""

    def make() -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
            s.bind((host, port))
            s.listen(64)
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        return s

    return netns_mod.call_in(netns, make, "netns-socket")


class Claim:
    """The node's tables claimed by one ``nftproxy run`` at a time: an abstract Unix socket bound
    in the programmed network namespace (the kernel releases it when the process ends). A proxy
    leaving its node for good (``leaving``) removes its tables only while nobody else claims
    them: a new nftproxy that started meanwhile (a reinstall right after an uninstall) holds the
    claim, and then the tables are its own."""

    def __init__(self, table: str, netns: str | None) -> None:
        self.address = f"\0nftproxy-tables-{table}"
        self.netns = netns
        self.sock: socket.socket | None = None

    def _bind(self) -> socket.socket | None:
        def make() -> socket.socket | None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.bind(self.address)
            except OSError as e:
                s.close()
                if e.errno == errno.EADDRINUSE:
                    return None
                raise
            return s

        return netns_mod.call_in(self.netns, make, "netns-claim")

    def take(self) -> bool:
        """Claim the tables (True: ours now, or already)."""
        if self.sock is None:
            self.sock = self._bind()
        return self.sock is not None

    def release(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def taken_elsewhere(self) -> bool:
        """Does another process claim them? (Asked without keeping the claim.)"""
        if self.sock is not None:
            return False
        s = self._bind()
        if s is None:
            return True
        s.close()
        return False
