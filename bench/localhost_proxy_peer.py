"""The server and clients of bench.localhost_proxy (standard library only: started with ``python -I -S``).

    python localhost_proxy_peer.py serve IP PORT               # a thread per connection
    python localhost_proxy_peer.py up HOST PORT BYTES ROUNDS   # send BYTES, the server counts them
    python localhost_proxy_peer.py down HOST PORT BYTES ROUNDS # the server sends BYTES
    python localhost_proxy_peer.py rr HOST PORT COUNT          # COUNT short request/responses

A connection's first line says what it wants: ``up`` (read to EOF, answer the byte count),
``down N`` (send N bytes, close) or ``rr`` (answer ``ok``, close). The clients print one JSON
object: the seconds of each round (up/down: connect to the last byte, a half-close included),
or the answered count and each connection's latency (rr: connect, request, answer, close), and
this process's CPU time over the loop.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import sys
import time

CHUNK = 1 << 18
BLOCK = bytes(range(256)) * (CHUNK // 256)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        s: socket.socket = self.request
        head = b""
        while b"\n" not in head:
            part = s.recv(64)
            if not part:
                return
            head += part
        line, rest = head.split(b"\n", 1)
        words = line.split()
        if words[0] == b"up":
            n = len(rest)
            buf = bytearray(CHUNK)
            while got := s.recv_into(buf):
                n += got
            s.sendall(f"{n}\n".encode())
        elif words[0] == b"down":
            left = int(words[1])
            view = memoryview(BLOCK)
            while left > 0:
                sent = s.send(view[: min(left, CHUNK)])
                left -= sent
        else:
            s.sendall(b"ok\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def up(host: str, port: int, size: int) -> float:
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=60) as s:
        s.sendall(b"up\n")
        view = memoryview(BLOCK)
        left = size
        while left > 0:
            sent = s.send(view[: min(left, CHUNK)])
            left -= sent
        s.shutdown(socket.SHUT_WR)  # the half-close the proxy passes on
        answer = s.recv(64)
    if int(answer) != size:
        raise RuntimeError(f"sent {size}, the server counted {answer!r}")
    return time.perf_counter() - t0


def down(host: str, port: int, size: int) -> float:
    t0 = time.perf_counter()
    got = 0
    buf = bytearray(CHUNK)
    with socket.create_connection((host, port), timeout=60) as s:
        s.sendall(f"down {size}\n".encode())
        while n := s.recv_into(buf):
            got += n
    if got != size:
        raise RuntimeError(f"asked for {size} bytes, got {got}")
    return time.perf_counter() - t0


def rr(host: str, port: int, count: int) -> dict[str, object]:
    latencies = []
    for _ in range(count):
        t0 = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=5.0) as s:
                s.sendall(b"rr\n")
                if s.recv(16) != b"ok\n":
                    continue
        except OSError:
            continue
        latencies.append(time.perf_counter() - t0)
    return {"ok": len(latencies), "latencies": latencies}


def main() -> int:
    cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "serve":
        with _Server((host, port), _Handler) as srv:
            srv.serve_forever()
        return 0
    cpu = _cpu()
    t0 = time.perf_counter()
    if cmd == "rr":
        out: dict[str, object] = rr(host, port, int(sys.argv[4]))
    else:
        size, rounds = int(sys.argv[4]), int(sys.argv[5])
        fn = up if cmd == "up" else down
        out = {"rounds": [fn(host, port, size) for _ in range(rounds)]}
    out["wall"] = time.perf_counter() - t0
    out["cpu"] = _cpu() - cpu
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
