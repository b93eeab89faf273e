"""Steady connections to a few Service IPs, counting failures (for churn, crash and outage runs).

    python -I -S testkit/lab/prober.py --rate 20 --timeout 1 HOST:PORT [HOST:PORT ...]

Every attempt is a fresh TCP connection (new source port, new conntrack entry) to the next
target in turn, reading the echo server's answer line. Runs until SIGTERM or SIGINT, then prints
one JSON object: attempts and failures per target, and the first 50 failures with their times.
Standard library only (started with -I -S like the probe).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from testkit.lab.probe import attempt
else:  # started as a script with -I -S: the probe module beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from probe import attempt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=20.0, help="attempts per second, all targets together")
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("targets", nargs="+")
    args = p.parse_args(argv)
    targets = [(t.rsplit(":", 1)[0].strip("[]"), int(t.rsplit(":", 1)[1])) for t in args.targets]
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    attempts = {f"{h}:{p}": 0 for h, p in targets}
    failed = dict.fromkeys(attempts, 0)
    failures: list[dict[str, object]] = []
    interval = 1.0 / args.rate
    start = time.time()
    print("READY", flush=True)
    i = 0
    next_at = time.monotonic()
    while not stop:
        host, port = targets[i % len(targets)]
        key = f"{host}:{port}"
        t = time.time()
        r = attempt("tcp", host, port, args.timeout)
        attempts[key] += 1
        if r["error"] is not None or not r["pod"]:
            failed[key] += 1
            if len(failures) < 50:
                failures.append({"target": key, "at": round(t - start, 3), "error": r["error"]})
        i += 1
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()
    json.dump(
        {"seconds": round(time.time() - start, 1), "attempts": attempts, "failed": failed, "failures": failures},
        sys.stdout,
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
