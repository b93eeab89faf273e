"""Many clients, one UDP datagram each: which pod answers each source address.

    python -m testkit.lab.sweep --sources-from 100.64.0.1 --count 10000 --source-port 40001 \
        HOST PORT [HOST PORT ...]

Every source address (``count`` consecutive IPv4 addresses from ``sources-from``; the namespace
must own them, e.g. ``ip route add local 100.64.0.0/18 dev lo``) sends one datagram from
``source-port`` to each HOST:PORT, on its own bound socket (its own conntrack flow), a window of
them at a time, and waits for the echo server's answer (testkit.lab.echo). Unanswered ones are
sent again (a new flow: the next source port) up to ``tries`` times. Prints one JSON object:
``{"HOST:PORT": {source: pod or null}}``.

Standard library only: started with ``python -I -S`` inside the lab's namespace.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import select
import socket
import sys
import time

WINDOW = 256  # sockets open at once (well under the default 1024 open files)


def _round(pairs: list[tuple[str, str, int]], sport: int, timeout: float) -> dict[tuple[str, str, int], str]:
    """One datagram per (source, host, port), WINDOW at a time: the pods that answered."""
    got: dict[tuple[str, str, int], str] = {}
    for i in range(0, len(pairs), WINDOW):
        open_: dict[int, tuple[socket.socket, tuple[str, str, int]]] = {}
        for pair in pairs[i : i + WINDOW]:
            src, host, port = pair
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setblocking(False)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((src, sport))
            s.connect((host, port))
            s.send(b"sweep\n")
            open_[s.fileno()] = (s, pair)
        deadline = time.monotonic() + timeout
        while open_ and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(open_), [], [], left)
            for fd in ready:
                s, pair = open_.pop(fd)
                try:
                    data = s.recv(4096)
                    got[pair] = json.loads(data.split(b"\n", 1)[0])["pod"]
                except (OSError, ValueError, KeyError):
                    pass
                s.close()
        for s, _ in open_.values():
            s.close()
    return got


def sweep(
    first: str, count: int, targets: list[tuple[str, int]], sport: int, tries: int = 3, timeout: float = 1.0
) -> dict[str, dict[str, str | None]]:
    start = ipaddress.IPv4Address(first)
    sources = [str(start + i) for i in range(count)]
    pending = [(src, host, port) for host, port in targets for src in sources]
    answers: dict[tuple[str, str, int], str] = {}
    for attempt in range(tries):
        answers.update(_round(pending, sport + attempt * 100, timeout))
        pending = [p for p in pending if p not in answers]
        if not pending:
            break
    return {f"{h}:{p}": {src: answers.get((src, h, p)) for src in sources} for h, p in targets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one UDP datagram from each of many source addresses")
    parser.add_argument("--sources-from", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--source-port", type=int, default=40000)
    parser.add_argument("targets", nargs="+", help="HOST PORT pairs")
    args = parser.parse_args(argv)
    if len(args.targets) % 2:
        parser.error("targets come in HOST PORT pairs")
    targets = [(args.targets[i], int(args.targets[i + 1])) for i in range(0, len(args.targets), 2)]
    json.dump(sweep(args.sources_from, args.count, targets, args.source_port), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
