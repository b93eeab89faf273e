"""A DNS client for pods (standard library only: piped into `python3 -` of a pod with nftproxy's
image, or run anywhere), in the two ways resolvers use UDP:

    python3 - query SERVER NAME [TYPE]            one query; prints the answers as JSON
    python3 - loop SERVER NAME fresh|reuse STOP   queries until the file STOP exists; prints counts

* ``fresh``: a new socket (a new source port) per query, as musl and most tools do.
* ``reuse``: one connected UDP socket, one source port, for every query, as glibc's resolver keeps
  it within a process: the same conntrack entry all along, the case that breaks when a proxy leaves
  a stale entry to a DNS pod that is gone.

A lookup counts as ``ok`` (an answer with our ID, rcode 0 and at least one record), ``failed`` (an
error rcode, no record, or an ICMP error) or ``timeout`` (no answer within TIMEOUT seconds, twice:
a query that got no answer is sent once more on the same socket, as glibc's resolver does;
``retried`` counts those, e.g. a reply in flight while the proxy deleted its flow).
"""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import struct
import sys
import time
from typing import Any

TIMEOUT = 2.0
INTERVAL = 0.02
TYPES = {"A": 1, "CNAME": 5, "AAAA": 28, "SRV": 33, "PTR": 12}
NAMES = {v: k for k, v in TYPES.items()}


def encode_name(name: str) -> bytes:
    return b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".") if p) + b"\0"


def build_query(qid: int, name: str, qtype: int) -> bytes:
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + struct.pack(">HH", qtype, 1)


def read_name(msg: bytes, off: int) -> tuple[str, int]:
    labels: list[str] = []
    end = -1
    while True:
        n = msg[off]
        if n & 0xC0 == 0xC0:  # a pointer
            if end < 0:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            continue
        if n == 0:
            off += 1
            break
        labels.append(msg[off + 1 : off + 1 + n].decode())
        off += 1 + n
    return ".".join(labels), (end if end >= 0 else off)


def parse(msg: bytes) -> tuple[int, int, list[tuple[str, str]]]:
    """(id, rcode, [(type, data)]) of a response."""
    qid, flags, qd, an, _, _ = struct.unpack(">HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    answers: list[tuple[str, str]] = []
    for _ in range(an):
        _, off = read_name(msg, off)
        rtype, _, _, rdlen = struct.unpack(">HHIH", msg[off : off + 10])
        off += 10
        rdata = msg[off : off + rdlen]
        if rtype == 1:
            data = socket.inet_ntop(socket.AF_INET, rdata)
        elif rtype == 28:
            data = socket.inet_ntop(socket.AF_INET6, rdata)
        elif rtype in (5, 12):
            data = read_name(msg, off)[0]
        elif rtype == 33:
            prio, weight, port = struct.unpack(">HHH", rdata[:6])
            data = f"{prio} {weight} {port} {read_name(msg, off + 6)[0]}"
        else:
            data = rdata.hex()
        answers.append((NAMES.get(rtype, str(rtype)), data))
        off += rdlen
    return qid, flags & 0xF, answers


def ask(sock: socket.socket, name: str, qtype: int) -> tuple[str, list[tuple[str, str]]]:
    """One lookup on a connected socket: ("ok" | "failed" | "timeout", answers)."""
    result, answers, _ = ask_why(sock, name, qtype)
    return result, answers


def ask_why(sock: socket.socket, name: str, qtype: int) -> tuple[str, list[tuple[str, str]], str]:
    """ask(), and why a lookup failed: "rcode N" (the server answered with an error or nothing),
    "icmp ERRNO" (the kernel reported an ICMP error: no server there) or "timeout"."""
    qid = random.randrange(1 << 16)
    sock.send(build_query(qid, name, qtype))
    deadline = time.monotonic() + TIMEOUT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout", [], "timeout"
        sock.settimeout(left)
        try:
            got, rcode, answers = parse(sock.recv(4096))
        except TimeoutError:
            return "timeout", [], "timeout"
        except OSError as e:  # ICMP port/host unreachable on a connected socket
            return "failed", [], f"icmp {errno.errorcode.get(e.errno or 0, e.errno)}"
        if got != qid:  # a late answer to an earlier query: not ours
            continue
        if rcode == 0 and answers:
            return "ok", answers, ""
        return "failed", answers, f"rcode {rcode}"


def connected(server: str) -> socket.socket:
    s = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((server, 53))
    return s


def loop(server: str, name: str, mode: str, stop: str) -> dict[str, Any]:
    """Counts, and each lookup that did not end "ok" the first time: [the wall-clock time
    (the pods share the machine's clock: it lines up with the logs), local port, why], the
    first 50, so that a failure says whether the server answered."""
    counts = {"ok": 0, "failed": 0, "timeout": 0, "retried": 0}
    events: list[list[Any]] = []
    sock = connected(server) if mode == "reuse" else None
    ports: set[int] = set()
    start = time.monotonic()
    while not os.path.exists(stop):
        s = sock or connected(server)
        port = s.getsockname()[1]
        ports.add(port)
        result, _, why = ask_why(s, name, TYPES["A"])
        if result != "ok" and len(events) < 50:
            events.append([round(time.time(), 3), port, why])
        if result == "timeout":  # once more on the same socket, as glibc's resolver (attempts:2)
            counts["retried"] += 1
            result, _, why = ask_why(s, name, TYPES["A"])
            if result != "ok" and len(events) < 50:
                events.append([round(time.time(), 3), port, f"retry: {why}"])
        counts[result] += 1
        if sock is None:
            s.close()
        time.sleep(INTERVAL)
    os.unlink(stop)
    return {**counts, "source_ports": len(ports), "seconds": round(time.monotonic() - start, 3), "events": events}


def main(argv: list[str]) -> int:
    if argv[0] == "query":
        server, name = argv[1], argv[2]
        qtype = TYPES[argv[3]] if len(argv) > 3 else TYPES["A"]
        result, answers = ask(connected(server), name, qtype)
        print(json.dumps({"result": result, "answers": answers}))
    elif argv[0] == "loop":
        print(json.dumps(loop(argv[1], argv[2], argv[3], argv[4])))
    else:
        raise SystemExit(f"usage: {__doc__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
