"""One proxied connection of the localhost NodePort proxy: the client's socket and, once one
answered, its endpoint's; bytes copied both ways with flow control, half-closes passed on, an
error on one side a reset of the other."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Awaitable, Callable

from nftproxy.nft.objects import Slot

log = logging.getLogger("nftproxy.localhost")

READ_SIZE = 256 * 1024  # bytes per read (asyncio's own read size)
# a client address -> a socket connected to an endpoint for it (None: none answered)
Dial = Callable[[str], Awaitable[tuple[socket.socket, Slot] | None]]


class Side(asyncio.BufferedProtocol):
    """One socket of a proxied connection: what it reads is written to its peer. Flow control:
    when the peer's send buffer fills, this side stops reading. An EOF is passed on as a
    half-close (write_eof, once what is buffered is sent); after both EOFs, both close.

    Read into a buffer of its own (BufferedProtocol: no new bytes object per read); the peer's
    transport sends from it at once, and when it cannot send everything it keeps the rest, which
    may be a view of this buffer (Python 3.12+): then the next read goes into a new one."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
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


class ClientSide(Side):
    """The accepted side: not read until an endpoint answered (its bytes wait in the kernel).

    Pausing in ``connection_made`` does not hold on every Python: 3.11.2's transport (Debian
    bookworm's) adds its reader after ``connection_made`` whatever it did, so a client that speaks
    first (an HTTP request) could be read before its endpoint was linked, and those bytes were
    lost (the client then waited for ever). What is read early is kept, reading pauses again, and
    ``link`` sends it first (an early half-close too)."""

    def __init__(self, conn: Conn) -> None:
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

    def link(self, backend: Side) -> None:
        """The endpoint answered: what the client sent so far goes first, then the rest."""
        assert self.transport is not None and backend.transport is not None
        self.peer = backend
        if self.early:
            backend.transport.write(bytes(self.early))
            self.early.clear()
        if self.eof:  # the client half-closed before the endpoint was linked
            backend.transport.write_eof()
        self.transport.resume_reading()


def reset(side: Side | None) -> None:
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


class Conn:
    """A client's connection and, once one answered, its endpoint's. ``conns``: the proxy's open
    connections (this one is in it until both sides are gone); ``where``: the listener, for logs;
    ``dial``: a socket connected to an endpoint for a client address."""

    def __init__(self, conns: set[Conn], where: str, dial: Dial) -> None:
        self.conns = conns
        self.where = where
        self.dial = dial
        self.client = ClientSide(self)
        self.backend: Side | None = None
        self.dialling: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.conns.add(self)
        self.dialling = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            await self._wire()
        except Exception as e:  # never a client left hanging (nor an unretrieved task error)
            log.warning("localhost NodePort %s: %s: %s", self.where, type(e).__name__, e)
            reset(self.client)
            reset(self.backend)

    async def _wire(self) -> None:
        client = self.client
        assert client.transport is not None
        peer = client.transport.get_extra_info("peername")
        found = await self.dial(str(peer[0]) if peer else "")
        if found is None:
            reset(client)
            return
        sock, _ = found
        if client.gone:
            sock.close()
            return
        # Its peer is set before it is read: an endpoint that speaks first (a banner) is
        # passed on at once (the client is not read until the endpoint is linked, below).
        backend = self.backend = Side(self)
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

    def lost(self, side: Side, exc: Exception | None) -> None:
        other = side.peer
        if other is not None and not other.gone:
            if exc is None:  # closed by us or cleanly: the other closes once it sent its buffer
                if other.transport is not None and not other.transport.is_closing():
                    other.transport.close()
            else:  # reset, or an error: reset the other side too
                reset(other)
        if side is self.client and self.dialling is not None and not self.dialling.done() and self.backend is None:
            self.dialling.cancel()  # still dialling for a client that is gone
        if self.client.gone and (self.backend is None or self.backend.gone or self.backend.transport is None):
            self.conns.discard(self)

    def abort(self) -> None:
        if self.dialling is not None and not self.dialling.done():
            self.dialling.cancel()
        reset(self.client)
        reset(self.backend)
