"""Localhost NodePorts in userspace: kube-proxy v1.37's localnodeportproxy, done better.

nftables cannot DNAT traffic to loopback, so with ``--nodeport-addresses`` naming a loopback CIDR
(``localhost`` = 127.0.0.0/8 and ::1/128) kube-proxy v1.37 (gate KubeProxyNFTablesLocalhostNodePorts)
serves each TCP NodePort on 127.0.0.1 and ::1 with a userspace proxy; UDP and SCTP are rejected
and counted in the table (compiler/skeleton.py). This is that proxy, in nftproxy's event loop,
updated after every successful sync with what the compiler chose (``Dataplane.localhost_nodeports``):

* one listener per TCP NodePort on the loopback address of each family with localhost NodePorts
  that the Service has (``--netns``: bound inside that namespace, as the health-check servers);
* the endpoints are the table's: ``externalTrafficPolicy: Local`` → this node's only, as upstream;
  none → no listener, so a client is refused (as upstream);
* an endpoint is picked by the Service's algorithm (``nftproxy.io/load-balancing``, else
  ``--load-balancing``), where upstream always picks at random: random; round-robin (a turn per
  listener); source-hash (a CRC-32 of the client address: the table's ``jhash`` never sees
  loopback, so there is no kernel choice to agree with; on 127.0.0.1 every client is one address,
  so all go to one endpoint while the list is unchanged). ``sessionAffinity: ClientIP``: a
  client address keeps the endpoint that last served it while it reconnects within the timeout
  (a sliding window, as the table's ``update @affinity`` and upstream's pin);
* **beyond upstream**: a connect to the chosen endpoint that fails (refused, unreachable, or no
  answer within ``connect_timeout``, 1 s; upstream waits 5 s and then closes the client) is
  retried on the next endpoint in the algorithm's order, never the same one twice, up to
  ``attempts`` (3) endpoints; then the client is reset. Each retry and each client left unserved
  is counted; the affinity record follows the endpoint that answered;
* bytes are copied both ways with flow control, and half-closes are passed on (a client's
  ``shutdown(SHUT_WR)`` reaches the endpoint as a FIN and its answer still comes back); an error
  on one side resets the other;
* a listener that cannot be opened (the port taken on loopback) is logged and counted
  (``kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total``) and tried again at
  the next update; the other listeners serve;
* a listener whose NodePort goes away (or loses its endpoints) stops accepting; its established
  connections go on, as the kernel's established flows do after a rule change (upstream closes
  them). Only ``close`` (the process stopping) resets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import resource
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from nftproxy.compiler import names
from nftproxy.compiler.balancing import ROUND_ROBIN, SOURCE_HASH
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.backend import Backend
from nftproxy.nft.objects import Family, Slot
from nftproxy.operator.metrics import Metrics

log = logging.getLogger("nftproxy.localhost")

LOOPBACK = {4: "127.0.0.1", 6: "::1"}
FAMILY = {4: "IPv4", 6: "IPv6"}  # kube-proxy's ip_family label values
CONNECT_TIMEOUT = 1.0  # seconds for one endpoint to accept a connection
ATTEMPTS = 3  # endpoints tried per client connection
BACKLOG = 4096  # the kernel caps it at net.core.somaxconn
SPARE = 64  # unconnected sockets made in the namespace at a time (see _Sockets)
WARN_EVERY = 10.0  # seconds: at most one "no endpoint answered" warning per listener
READ_SIZE = 256 * 1024  # bytes per read (asyncio's own read size)

Wanted = dict[int, dict[int, LocalhostNodePort]]  # IP version -> NodePort -> what to serve
T = TypeVar("T")


# -- which endpoint: pure, no I/O --------------------------------------------------------------


def client_hash(address: str) -> int:
    """source-hash: a stable hash of the client address (the same on every run)."""
    return zlib.crc32(address.encode())


class Picker:
    """The endpoints a new connection of one listener tries, in order; the affinity records."""

    def __init__(
        self, spec: LocalhostNodePort, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rng = rng or random.Random()
        self.clock = clock
        self.turn = 0  # round-robin: the next slot
        self.pins: dict[str, tuple[Slot, float]] = {}  # ClientIP affinity: client -> (endpoint, last served)
        self.spec = spec
        self.members = frozenset(spec.endpoints)

    def update(self, spec: LocalhostNodePort) -> None:
        """A new endpoint list or policy. A record whose endpoint is gone is ignored (and
        dropped when met); a new affinity timeout drops them all, as upstream."""
        if spec.affinity != self.spec.affinity:
            self.pins.clear()
        self.spec = spec
        self.members = frozenset(spec.endpoints)

    def candidates(self, client: str) -> Iterator[Slot]:
        """The endpoints for one connection from ``client``, best first, each at most once:
        its live affinity record's endpoint, then the algorithm's pick, then the others in the
        algorithm's order (round-robin and source-hash: the following slots; random: a random
        order). Lazy: the retry order is only worked out when a retry happens."""
        eps = self.spec.endpoints
        n = len(eps)
        if n == 0:
            return
        pinned = self._pinned(client)
        if pinned is not None:
            yield pinned
        algorithm = self.spec.algorithm
        if algorithm == ROUND_ROBIN:
            start = self.turn % n
            self.turn = start + 1  # one turn per connection, not per retry (numgen inc per new flow)
            order: Iterator[Slot] = (eps[(start + i) % n] for i in range(n))
        elif algorithm == SOURCE_HASH:
            start = client_hash(client) % n
            order = (eps[(start + i) % n] for i in range(n))
        else:
            order = self._random(eps)
        for ep in order:
            if ep != pinned:
                yield ep

    def _random(self, eps: tuple[Slot, ...]) -> Iterator[Slot]:
        first = self.rng.randrange(len(eps))
        yield eps[first]
        rest = [e for i, e in enumerate(eps) if i != first]
        self.rng.shuffle(rest)
        yield from rest

    def _pinned(self, client: str) -> Slot | None:
        timeout = self.spec.affinity
        if not timeout:
            return None
        record = self.pins.get(client)
        if record is None:
            return None
        ep, last = record
        if self.clock() - last <= timeout and ep in self.members:
            return ep
        del self.pins[client]
        return None

    def served(self, client: str, ep: Slot) -> None:
        """``ep`` accepted ``client``'s connection: its affinity record (renewed)."""
        timeout = self.spec.affinity
        if not timeout:
            return
        now = self.clock()
        if len(self.pins) >= 4096:  # bounded: drop the expired ones
            self.pins = {c: r for c, r in self.pins.items() if now - r[1] <= timeout}
        self.pins[client] = (ep, now)


# -- sockets inside the namespace ----------------------------------------------------------------


def _listening(version: int, port: int) -> socket.socket:
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


def _listening_all(keys: list[tuple[int, int]]) -> list[socket.socket | OSError]:
    out: list[socket.socket | OSError] = []
    for version, port in keys:
        try:
            out.append(_listening(version, port))
        except OSError as e:
            out.append(e)
    return out


def _unconnected(version: int, count: int) -> list[socket.socket]:
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    out = []
    for _ in range(count):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setblocking(False)
        out.append(s)
    return out


class _Sockets:
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
            return _unconnected(version, 1)[0]
        spare = self.spare[version]
        if not spare:
            spare += await self.run(_unconnected, version, SPARE)
        return spare.pop()

    def close(self) -> None:
        for spare in self.spare.values():
            for s in spare:
                s.close()
            spare.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False)
            self.pool = None


# -- one proxied connection: two sockets, bytes both ways -----------------------------------------


class _Side(asyncio.BufferedProtocol):
    """One socket of a proxied connection: what it reads is written to its peer. Flow control:
    when the peer's send buffer fills, this side stops reading. An EOF is passed on as a
    half-close (write_eof, once what is buffered is sent); after both EOFs, both close.

    Read into a buffer of its own (BufferedProtocol: no new bytes object per read); the peer's
    transport sends from it at once, and when it cannot send everything it keeps the rest, which
    may be a view of this buffer (Python 3.12+): then the next read goes into a new one."""

    def __init__(self, conn: _Conn) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.eof = False
        self.gone = False
        self.buffer: bytearray | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> bytearray:
        if self.buffer is None:
            self.buffer = bytearray(READ_SIZE)
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        peer = self.peer.transport if self.peer is not None else None
        if peer is not None and not peer.is_closing() and self.buffer is not None:
            peer.write(memoryview(self.buffer)[:nbytes])
            if peer.get_write_buffer_size():  # it kept some of it: never overwrite that
                self.buffer = None

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.write_eof()
            if peer.eof:  # both directions are done
                self.conn.close()
        return True  # keep our sending half open: the other direction goes on

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.conn.lost(self, exc)


class _ClientSide(_Side):
    """The accepted side: not read until an endpoint answered (its bytes wait in the kernel).

    Pausing in ``connection_made`` does not hold on every Python: 3.11.2's transport (Debian
    bookworm's) adds its reader after ``connection_made`` whatever it did, so a client that speaks
    first (an HTTP request) could be read before its endpoint was linked, and those bytes were
    lost (the client then waited for ever). What is read early is kept, reading pauses again, and
    ``link`` sends it first (an early half-close too)."""

    def __init__(self, conn: _Conn) -> None:
        super().__init__(conn)
        self.early = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self.conn.start()

    def buffer_updated(self, nbytes: int) -> None:
        if self.peer is None:  # read before the endpoint is linked: kept for it
            assert self.buffer is not None and self.transport is not None
            self.early += memoryview(self.buffer)[:nbytes]
            self.transport.pause_reading()
            return
        super().buffer_updated(nbytes)

    def link(self, backend: _Side) -> None:
        """The endpoint answered: what the client sent so far goes first, then the rest."""
        assert self.transport is not None and backend.transport is not None
        self.peer = backend
        if self.early:
            backend.transport.write(bytes(self.early))
            self.early.clear()
        if self.eof:  # the client half-closed before the endpoint was linked
            backend.transport.write_eof()
        self.transport.resume_reading()


def reset(side: _Side | None) -> None:
    """Close with a TCP reset (SO_LINGER 0): the other end sees its connection fail, not a clean
    (empty) answer."""
    t = side.transport if side is not None else None
    if t is None or t.is_closing():
        return
    sock = t.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    t.abort()


class _Conn:
    """A client's connection and, once one answered, its endpoint's."""

    def __init__(self, proxy: LocalhostNodePorts, listener: _Listener) -> None:
        self.proxy = proxy
        self.listener = listener
        self.client = _ClientSide(self)
        self.backend: _Side | None = None
        self.dial: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.proxy.conns.add(self)
        self.dial = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            await self._wire()
        except Exception as e:  # never a client left hanging (nor an unretrieved task error)
            log.warning("localhost NodePort %s: %s: %s", self.listener.where, type(e).__name__, e)
            reset(self.client)
            reset(self.backend)

    async def _wire(self) -> None:
        client = self.client
        assert client.transport is not None
        peer = client.transport.get_extra_info("peername")
        found = await self.proxy.dial(self.listener, str(peer[0]) if peer else "")
        if found is None:
            reset(client)
            return
        sock, _ = found
        if client.gone:
            sock.close()
            return
        # Its peer is set before it is read: an endpoint that speaks first (a banner) is
        # passed on at once (the client is not read until the endpoint is linked, below).
        backend = self.backend = _Side(self)
        backend.peer = client
        try:
            await asyncio.get_running_loop().create_connection(lambda: backend, sock=sock)
        except OSError:
            sock.close()
            reset(client)
            return
        if client.gone:  # it went away meanwhile
            reset(backend)
            return
        client.link(backend)

    def close(self) -> None:
        """Both directions ended: close both (each sends what it still buffers first)."""
        for side in (self.client, self.backend):
            if side is not None and side.transport is not None and not side.transport.is_closing():
                side.transport.close()

    def lost(self, side: _Side, exc: Exception | None) -> None:
        other = side.peer
        if other is not None and not other.gone:
            if exc is None:  # closed by us or cleanly: the other closes once it sent its buffer
                if other.transport is not None and not other.transport.is_closing():
                    other.transport.close()
            else:  # reset, or an error: reset the other side too
                reset(other)
        if side is self.client and self.dial is not None and not self.dial.done() and self.backend is None:
            self.dial.cancel()  # still dialling for a client that is gone
        if self.client.gone and (self.backend is None or self.backend.gone or self.backend.transport is None):
            self.proxy.conns.discard(self)

    def abort(self) -> None:
        if self.dial is not None and not self.dial.done():
            self.dial.cancel()
        reset(self.client)
        reset(self.backend)


# -- the listeners ----------------------------------------------------------------------------------


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
        metrics: Metrics,
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
        self.sockets = _Sockets(netns)
        self.listeners: dict[tuple[int, int], _Listener] = {}  # (IP version, NodePort) -> listener
        self.failed: set[tuple[int, int]] = set()  # not opened at the last update: retried
        self.conns: set[_Conn] = set()
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
        socks = await self.sockets.run(_listening_all, new) if new else []
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
        return lambda: _Conn(self, listener).client

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


def localhost_rejections(backend: Backend, config: ProxyConfig) -> dict[tuple[str, str], int]:
    """(ip_family, protocol) -> the packets the table rejected on localhost NodePorts: its named
    counters (kube-proxy's ``kubeproxy_nftables_localhost_nodeport_rejected_packets_total``)."""
    out: dict[tuple[str, str], int] = {}
    for family in Family:
        rejected = config.localhost_rejected(family.version)
        if not rejected:
            continue
        packets = backend.counter_packets(family, config.table)
        for proto in rejected:
            n = packets.get(names.localhost_nodeport_rejected_counter(proto))
            if n is not None:
                out[(FAMILY[family.version], proto.upper())] = n
    return out
