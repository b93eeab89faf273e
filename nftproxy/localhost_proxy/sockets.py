"""Sockets of the localhost NodePort proxy, made inside the namespace (``--netns``) or where the
proxy runs: listening on loopback, and unconnected ones for the connections to endpoints."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from nftproxy.nft import netns as netns_mod

LOOPBACK = {4: "127.0.0.1", 6: "::1"}
SPARE = 64  # unconnected sockets made in the namespace at a time (see Sockets)
T = TypeVar("T")


def listening(version: int, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET6 if version == 6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if version == 6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((LOOPBACK[version], port))
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def listening_all(keys: list[tuple[int, int]]) -> list[socket.socket | OSError]:
    out: list[socket.socket | OSError] = []
    for version, port in keys:
        try:
            out.append(listening(version, port))
        except OSError as e:
            out.append(e)
    return out


def unconnected(version: int, count: int) -> list[socket.socket]:
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    out = []
    for _ in range(count):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setblocking(False)
        out.append(s)
    return out


class Sockets:
    """Sockets made in ``netns`` (a socket keeps the namespace it was made in): by one thread
    that entered it, kept for the proxy's life. The connections to endpoints take theirs from a
    stock of unconnected sockets made ``SPARE`` at a time, so a new connection costs no thread
    hop. Without a namespace, made where the proxy runs."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self.pool: ThreadPoolExecutor | None = None
        self.spare: dict[int, list[socket.socket]] = {4: [], 6: []}

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        if self.netns is None:
            return fn(*args)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, "localhost-netns", initializer=netns_mod.enter, initargs=(self.netns,))
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: fn(*args))

    async def stream(self, version: int) -> socket.socket:
        if self.netns is None:
            return unconnected(version, 1)[0]
        spare = self.spare[version]
        if not spare:
            spare += await self.run(unconnected, version, SPARE)
        return spare.pop()

    def close(self) -> None:
        for spare in self.spare.values():
            for s in spare:
                s.close()
            spare.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False)
            self.pool = None
