"""Listening sockets in the programmed network namespace, with the standard library alone (bound
at start, before the first sync: ``boot``)."""

from __future__ import annotations

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
