"""A client that opens a new TCP connection all the time (HTTP GET, one per connection).

    python -m testkit.realcluster.traffic URL [URL...] [--interval 0.02] [--timeout 2] [--duration S]

Runs until SIGTERM/SIGINT (or ``--duration``), then prints one JSON object: ``ok``, ``failed``,
``pods`` (answers per pod name) and the first ``errors`` (time since start ``t``, time.monotonic()
``at``, URL, error). Started inside a
namespace (``nsenter --net=…``) by the tests and the demo; prints ``READY`` first. Standard library.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import time
from urllib.parse import urlsplit


def fetch(host: str, port: int, timeout: float) -> dict[str, str]:
    """One GET / on a new connection; the echo server's JSON answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise OSError(f"bad answer: {head[:60]!r}")
    answer: dict[str, str] = json.loads(body)
    return answer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.realcluster.traffic")
    p.add_argument("urls", nargs="+")
    p.add_argument("--interval", type=float, default=0.02, help="pause between two requests")
    p.add_argument("--timeout", type=float, default=2.0)
    p.add_argument("--duration", type=float, default=0.0, help="0: until SIGTERM")
    args = p.parse_args(argv)
    targets = []
    for url in args.urls:
        u = urlsplit(url)
        targets.append((url, u.hostname or "", u.port or 80))
    stop = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    ok = failed = 0
    pods: dict[str, int] = {}
    errors: list[dict[str, object]] = []
    t0 = time.monotonic()
    print("READY", flush=True)
    i = 0
    while not stop and not (args.duration and time.monotonic() - t0 > args.duration):
        url, host, port = targets[i % len(targets)]
        i += 1
        try:
            answer = fetch(host, port, args.timeout)
            ok += 1
            pods[answer["pod"]] = pods.get(answer["pod"], 0) + 1
        except (OSError, ValueError, KeyError) as e:
            failed += 1
            if len(errors) < 20:
                now = time.monotonic()  # CLOCK_MONOTONIC: comparable with other processes' (GenerationWatch)
                errors.append({"t": round(now - t0, 3), "at": now, "url": url, "error": f"{type(e).__name__}: {e}"})
        time.sleep(args.interval)
    json.dump(
        {"ok": ok, "failed": failed, "pods": pods, "errors": errors, "seconds": round(time.monotonic() - t0, 2)},
        sys.stdout,
    )
    print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
