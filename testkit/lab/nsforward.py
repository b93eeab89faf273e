"""TCP forwarder from a child network namespace to this namespace's loopback.

    python -I -S testkit/lab/nsforward.py --netns NODE --listen-port 0 --target-port 6443

A process in a child network namespace cannot reach a server on the root namespace's 127.0.0.1.
This process enters the namespace NODE (``/run/netns/NODE``), creates its listening socket there
(a socket belongs to the namespace it was created in), goes back to the namespace it started in,
and relays every accepted connection to 127.0.0.1:TARGET from there. The client in NODE talks to
``https://127.0.0.1:PORT`` and TLS stays end to end (the apiserver certificate's 127.0.0.1 SAN is
valid). Prints ``READY <port>`` once it listens; stop it by its PID (SIGTERM). Standard library
only.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def listen_in(netns: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket created inside ``netns``; the calling thread ends up back home."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)
    return sock


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _serve(conn: socket.socket, target: tuple[str, int]) -> None:
    try:
        out = socket.create_connection(target, timeout=10)
    except OSError:
        conn.close()
        return
    out.settimeout(None)
    t = threading.Thread(target=_pump, args=(out, conn), daemon=True)
    t.start()
    _pump(conn, out)
    t.join()
    conn.close()
    out.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--netns", required=True)
    p.add_argument("--listen-port", type=int, default=0)
    p.add_argument("--target-port", type=int, required=True)
    p.add_argument("--target-host", default="127.0.0.1")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    lsock = listen_in(args.netns, args.listen_port)  # before any thread: setns is per thread
    print(f"READY {lsock.getsockname()[1]}", flush=True)
    target = (args.target_host, args.target_port)
    while True:
        conn, _ = lsock.accept()
        threading.Thread(target=_serve, args=(conn, target), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
