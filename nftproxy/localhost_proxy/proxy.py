"""The localhost NodePort proxy: one listener per TCP NodePort on loopback, updated after every
successful sync; each accepted client dialled to an endpoint (the picker's order, retried on the
next), then relayed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import resource
import socket
import time
from collections.abc import Callable

from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.localhost_proxy.metrics import FAMILY, ProxyMetrics
from nftproxy.localhost_proxy.picker import Picker
from nftproxy.localhost_proxy.relay import Conn
from nftproxy.localhost_proxy.sockets import LOOPBACK, Sockets, listening_all
from nftproxy.nft.objects import Slot

log = logging.getLogger("nftproxy.localhost")

CONNECT_TIMEOUT = 1.0  # seconds for one endpoint to accept a connection
ATTEMPTS = 3  # endpoints tried per client connection
BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
WARN_EVERY = 10.0  # seconds: at most one "no endpoint answered" warning per listener

Wanted = dict[int, dict[int, LocalhostNodePort]]  # IP version -> NodePort -> what to serve


class _Listener:
    def __init__(self, version: int, spec: LocalhostNodePort, picker: Picker) -> None:
        self.version = version
        self.spec = spec
        self.picker = picker
        self.server: asyncio.Server | None = None
        self.warned = 0.0  # when "no endpoint answered" was last logged
        self.unwarned = 0  # clients unserved since

    @property
    def where(self) -> str:
        host = LOOPBACK[self.version]
        return f"{'[' + host + ']' if self.version == 6 else host}:{self.spec.node_port}"


class LocalhostNodePorts:
    """The proxy: ``update`` after each successful sync, ``close`` at the end."""

    def __init__(
        self,
        netns: str | None,
        metrics: ProxyMetrics,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        attempts: int = ATTEMPTS,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.connect_timeout = connect_timeout
        self.attempts = attempts
        self.rng = rng or random.Random()
        self.clock = clock
        self.sockets = Sockets(netns)
        self.listeners: dict[tuple[int, int], _Listener] = {}  # (IP version, NodePort) -> listener
        self.failed: set[tuple[int, int]] = set()  # not opened at the last update: retried
        self.conns: set[Conn] = set()
        self._wanted: Wanted | None = None

    async def update(self, wanted: Wanted) -> None:
        """Serve exactly these NodePorts (those with endpoints), on the loopback address of
        their family. Cheap when ``wanted`` is the object of the last call and every listener
        opened (``Dataplane.localhost_nodeports`` returns the same object until it changes)."""
        if wanted is self._wanted and not self.failed:
            return
        want = {(v, port): spec for v, ports in wanted.items() for port, spec in ports.items() if spec.endpoints}
        closed = [k for k in self.listeners if k not in want]
        for key in closed:
            listener = self.listeners.pop(key)
            if listener.server is not None:
                listener.server.close()  # stops accepting; its connections go on
            log.debug("localhost NodePort %s (%s) closed", listener.where, listener.spec.name)
        for key, spec in want.items():
            if key in self.listeners:
                self.listeners[key].spec = spec
                self.listeners[key].picker.update(spec)
        new = sorted(k for k in want if k not in self.listeners)
        socks = await self.sockets.run(listening_all, new) if new else []
        self.failed = set()
        failed: list[str] = []
        loop = asyncio.get_running_loop()
        for key, sock in zip(new, socks, strict=True):
            listener = _Listener(key[0], want[key], Picker(want[key], self.rng, self.clock))
            if not isinstance(sock, OSError):
                try:
                    listener.server = await loop.create_server(self._accept(listener), sock=sock, backlog=BACKLOG)
                except OSError as e:
                    sock.close()
                    sock = e
            if isinstance(sock, OSError):
                self.failed.add(key)
                self.metrics.localhost_listener_failures.labels(FAMILY[key[0]]).inc()
                failed.append(f"{listener.where} ({listener.spec.name}): {sock.strerror or sock}")
                continue
            self.listeners[key] = listener
            log.debug("localhost NodePort %s (%s) serving", listener.where, listener.spec.name)
        if failed:
            log.warning("localhost NodePort listeners not opened (tried again at the next sync): %s", "; ".join(failed))
        self._wanted = wanted  # (not before: a call that raised is done again next time)
        opened = len(new) - len(failed)
        if opened or closed:
            log.info(
                "localhost NodePorts: %d listeners (%d opened, %d closed)", len(self.listeners), opened, len(closed)
            )
        self._count()

    def _accept(self, listener: _Listener) -> Callable[[], asyncio.BaseProtocol]:
        dial = functools.partial(self.dial, listener)
        return lambda: Conn(self.conns, listener.where, dial).client

    def _count(self) -> None:
        for version, family in FAMILY.items():
            n = sum(1 for v, _ in self.listeners if v == version)
            if n or (self._wanted and version in self._wanted):
                self.metrics.localhost_listeners.labels(family).set(n)

    async def dial(self, listener: _Listener, client: str) -> tuple[socket.socket, Slot] | None:
        """A socket connected to an endpoint for ``client``'s connection: the picker's first
        choice, else the next ones, up to ``attempts``; None if none answered."""
        loop = asyncio.get_running_loop()
        family = FAMILY[listener.version]
        errors: list[str] = []
        for ep in listener.picker.candidates(client):
            if len(errors) == self.attempts:
                break
            if errors:
                self.metrics.localhost_dial_retries.labels(family).inc()
            try:
                sock = await self.sockets.stream(listener.version)
            except OSError as e:  # e.g. out of file descriptors: this attempt fails
                errors.append(f"{_endpoint(ep)} {e.strerror or e}")
                continue
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await loop.sock_connect(sock, (ep[0], int(ep[1])))
            except BaseException as e:
                sock.close()
                if not isinstance(e, OSError | TimeoutError):
                    raise  # cancelled: the client went away
                why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
                errors.append(f"{_endpoint(ep)} {why}")
                log.debug("localhost NodePort %s: %s %s", listener.where, _endpoint(ep), why)
                continue
            listener.picker.served(client, ep)
            self.metrics.localhost_connections.labels(family).inc()
            return sock, ep
        self.metrics.localhost_unserved.labels(family).inc()
        self._warn(listener, errors)
        return None

    def _warn(self, listener: _Listener, errors: list[str]) -> None:
        now = self.clock()
        listener.unwarned += 1
        if now - listener.warned < WARN_EVERY and listener.warned:
            return
        more = f" ({listener.unwarned} clients unserved since the last warning)" if listener.unwarned > 1 else ""
        log.warning(
            "localhost NodePort %s (%s): no endpoint answered, client reset: %s%s",
            listener.where, listener.spec.name, "; ".join(errors) or "no endpoint", more,
        )  # fmt: skip
        listener.warned, listener.unwarned = now, 0

    async def close(self) -> None:
        """Stop every listener and reset every connection (the process is stopping)."""
        for listener in self.listeners.values():
            if listener.server is not None:
                listener.server.close()
        self.listeners.clear()
        for conn in list(self.conns):
            conn.abort()
        self.conns.clear()
        self._count()
        self.sockets.close()


def _endpoint(ep: Slot) -> str:
    return f"[{ep[0]}]:{ep[1]}" if ":" in ep[0] else f"{ep[0]}:{ep[1]}"


def raise_fd_limit() -> tuple[int, int]:
    """Each proxied connection holds two descriptors: the soft limit goes up to the hard one (as
    Go's runtime does for every program, kube-proxy's included). Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
