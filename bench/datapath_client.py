"""The client and server of bench.datapath (standard library only: started with ``python -I -S``).

    python datapath_client.py serve IP PORT          # answers each connection's line with "ok"
    python datapath_client.py connect IP PORT COUNT  # COUNT new connections, one after the other

``connect`` prints one JSON object: connections answered, each one's latency (connect, one
request, the answer, close) in seconds, and this process's system CPU time over the loop.
"""

from __future__ import annotations

import json
import resource
import socket
import sys
import time


def serve(host: str, port: int) -> None:
    with socket.create_server((host, port), backlog=128) as srv:
        while True:
            conn, _ = srv.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"ok\n")


def connect(host: str, port: int, count: int) -> dict[str, object]:
    latencies = []
    ok = 0
    before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    for _ in range(count):
        t0 = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=2.0) as s:
                s.sendall(b"x\n")
                if s.recv(16) == b"ok\n":
                    ok += 1
        except OSError:
            continue
        latencies.append(time.perf_counter() - t0)
    stime = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    return {"ok": ok, "latencies": latencies, "sys_seconds": stime}


def main() -> int:
    cmd, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if cmd == "serve":
        serve(host, port)
        return 0
    print(json.dumps(connect(host, port, int(sys.argv[4]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
