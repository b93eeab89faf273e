"""TCP forwarders between the machine's loopback and the cluster's node namespaces (one process).

    python -m testkit.realcluster.forward --listen NETNS_PATH,PORT,TARGET_PORT[,ADDRESS] [...] --egress UDS,NETNS_PATH

* ``--listen``: a socket bound to ADDRESS:PORT (default 127.0.0.1) *inside* the network namespace
  NETNS_PATH (created after setns, then the process returns to its own namespace), each connection
  forwarded to 127.0.0.1:TARGET_PORT where this process runs. Nodes reach the apiserver on loopback
  this way, with the admin kubeconfig unchanged; the control-plane namespace's address on the node
  segment (the apiserver's advertised address, the `kubernetes` Service's endpoint) too.
* ``--egress``: an HTTP CONNECT proxy on a Unix socket for the apiserver's egress selector
  (``cluster``): ``CONNECT 172.30.0.11:10250`` is dialled from inside NETNS_PATH, so that
  ``kubectl logs/exec`` reach the kubelets in their namespaces.

Nothing is configured in any namespace: sockets only. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def in_netns(path: str, make: Callable[[], T]) -> T:
    """Run ``make`` (socket creation) with this thread inside the network namespace at ``path``."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
        try:
            return make()
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - cannot fail for our own ns
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
        os.close(target)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


async def _splice(
    a_r: asyncio.StreamReader, a_w: asyncio.StreamWriter, b_r: asyncio.StreamReader, b_w: asyncio.StreamWriter
) -> None:
    try:
        await asyncio.gather(_pipe(a_r, b_w), _pipe(b_r, a_w))
    finally:
        for w in (a_w, b_w):
            w.close()


def _listener(netns: str, port: int, address: str) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
        s.listen(128)
        s.setblocking(False)
        return s

    return in_netns(netns, make)


async def _serve_listen(netns: str, port: int, target: int, address: str) -> asyncio.Server:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            w.close()
            return
        await _splice(r, w, tr, tw)

    return await asyncio.start_server(handle, sock=_listener(netns, port, address))


async def _serve_egress(uds: str, netns: str) -> asyncio.Server:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = await r.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or not port.isdigit():
                raise ValueError(target)

            def make() -> socket.socket:
                s = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
                s.setblocking(False)
                return s

            sock = in_netns(netns, make)
            await asyncio.get_running_loop().sock_connect(sock, (host.strip("[]"), int(port)))
            tr, tw = await asyncio.open_connection(sock=sock)
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            with contextlib.suppress(Exception):
                w.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{e}\n".encode())
                await w.drain()
            w.close()
            return
        w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await w.drain()
        await _splice(r, w, tr, tw)

    with contextlib.suppress(FileNotFoundError):
        os.unlink(uds)
    return await asyncio.start_unix_server(handle, path=uds)


async def _main(listens: list[tuple[str, int, int, str]], egress: tuple[str, str] | None, ready: str | None) -> None:
    servers = [await _serve_listen(*spec) for spec in listens]
    if egress:
        servers.append(await _serve_egress(*egress))
    if ready:
        with open(ready, "w") as f:
            f.write(f"{os.getpid()}\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.realcluster.forward")
    p.add_argument("--listen", action="append", default=[], help="NETNS_PATH,PORT,TARGET_PORT[,ADDRESS]")
    p.add_argument("--egress", help="UDS_PATH,NETNS_PATH")
    p.add_argument("--ready-file", help="written once every socket listens")
    args = p.parse_args(argv)
    listens = []
    for spec in args.listen:
        ns, port, target, *address = spec.split(",")
        listens.append((ns, int(port), int(target), address[0] if address else "127.0.0.1"))
    egress: tuple[str, str] | None = None
    if args.egress:
        uds, netns = args.egress.split(",", 1)
        egress = (uds, netns)
    asyncio.run(_main(listens, egress, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
