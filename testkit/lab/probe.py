"""Client for the echo server: N independent attempts, one JSON list of results on stdout.

    python -m testkit.lab.probe --proto tcp|udp|sctp --count N --timeout T \
        [--source IP] HOST PORT

Every attempt uses a new socket (so a new source port and a new conntrack entry). TCP and SCTP
connect and read the answer line; UDP uses a connected socket, sends one datagram and waits for
the answer. Each result is ``{"pod", "peer", "port", "error"}``; ``error`` is ``null`` on success,
"refused" (RST or ICMP port unreachable), "timeout", "unreachable" (EHOSTUNREACH/ENETUNREACH,
e.g. ICMP host/admin-prohibited), "reset", or another message.

Standard library only, and few imports: the lab starts it with ``python -I -S`` for every
``probe()`` call, so start-up time matters.
"""

from __future__ import annotations

import argparse
import errno
import json
import socket
import sys
import time

UNREACHABLE_ERRNOS = {errno.EHOSTUNREACH, errno.ENETUNREACH}


def _classify(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(exc, ConnectionResetError):
        return "reset"
    if isinstance(exc, OSError) and exc.errno in UNREACHABLE_ERRNOS:
        return "unreachable"
    return f"{type(exc).__name__}: {exc}"


Result = dict[str, object]


def _result(pod: object = None, peer: object = None, error: str | None = None, port: object = None) -> Result:
    return {"pod": pod, "peer": peer, "error": error, "port": port}


def _parse(data: bytes) -> Result:
    line = data.split(b"\n", 1)[0]
    if not line:
        return _result(error="empty")
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return _result(error=f"garbage: {line[:80]!r}")
    return _result(pod=obj.get("pod"), peer=obj.get("peer"), port=obj.get("port"))


def attempt(
    proto: str,
    host: str,
    port: int,
    timeout: float,
    source: str | None = None,
    source_port: int = 0,
) -> Result:
    """One connection attempt with a fresh socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if proto == "udp":
        kind, ipproto = socket.SOCK_DGRAM, 0
    elif proto == "sctp":
        kind, ipproto = socket.SOCK_STREAM, socket.IPPROTO_SCTP
    else:
        kind, ipproto = socket.SOCK_STREAM, 0
    deadline = time.monotonic() + timeout
    try:
        sock = socket.socket(family, kind, ipproto)
    except OSError as exc:
        return _result(error=_classify(exc))
    with sock:
        try:
            sock.settimeout(timeout)
            if source or source_port:
                if source_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((source or ("::" if family == socket.AF_INET6 else "0.0.0.0"), source_port))
            sock.connect((host, port))
            if proto == "udp":
                sock.send(b"probe\n")
            buf = b""
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(4096)
                if not chunk:
                    break
                buf += chunk
                if proto == "udp":
                    break
        except Exception as exc:  # every failure is a result, never a crash
            return _result(error=_classify(exc))
    return _parse(buf)


def probe(
    proto: str,
    host: str,
    port: int,
    *,
    count: int = 1,
    timeout: float = 1.0,
    source: str | None = None,
    source_port: int = 0,
) -> list[Result]:
    return [attempt(proto, host, port, timeout, source, source_port) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="probe an echo server")
    parser.add_argument("--proto", choices=("tcp", "udp", "sctp"), default="tcp")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--source", default=None, help="bind to this local address")
    parser.add_argument("--source-port", type=int, default=0, help="bind to this port (same UDP flow each time)")
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    results = probe(
        args.proto, args.host, args.port, count=args.count, timeout=args.timeout, source=args.source,
        source_port=args.source_port,
    )  # fmt: skip
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
