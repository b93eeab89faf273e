"""Churn, crash and outage runs at scale (the long variants of tests/resilience/test_churn.py).

    flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.churn [--services 10000] [--duration 600]
        [--rate 50] [--scenarios churn,crash,outage] [--crash-every 60] [--outage 60]

Each scenario gets a fresh control plane (etcd + kube-apiserver on loopback), a node namespace,
`nftproxy run --netns`, N Services, then DURATION seconds of API writes at RATE per second while a
client pod connects to stable Services; at the end the checker (nftproxy.diagnose.verify) compares the
kernel with the API. Prints one JSON summary per scenario and a table line:
test, load, faults, failed connections, lost updates.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.figures import figure
from testkit.k8s.controlplane import ControlPlane
from testkit.scenarios.churn import Plan, Result, run


def line(name: str, res: Result, faults: str) -> str:
    s = res.summary()
    load = f"{s['services']} Services, {s['churn_s']:.0f} s at {s['achieved_rate_per_s']}/s"
    return (
        f"| {name} | {load} | {faults} | {s['failed_connections']} of {s['connections']} | {s['lost_updates']} | "
        f"p50 {s['event_to_kernel_p50_ms']} / p99 {s['event_to_kernel_p99_ms']} ms | "
        f"{s['sync_failures']} | {s['rss_growth_pct']}% |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.churn", description=__doc__)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--duration", type=float, default=600.0)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--scenarios", default="churn,crash,outage")
    p.add_argument("--crash-every", type=float, default=60.0)
    p.add_argument("--outage", type=float, default=60.0, help="seconds each of the apiserver and etcd is stopped")
    p.add_argument("--min-sync-period", default="1s")
    args = p.parse_args(argv)
    rows = []
    base = Plan(
        services=args.services,
        duration=args.duration,
        rate=args.rate,
        min_sync_period=args.min_sync_period,
        converge_timeout=300,
    )
    for name in args.scenarios.split(","):
        if name == "churn":
            plan, faults = base, "none"
        elif name == "crash":
            plan = Plan(**{**base.__dict__, "crash_every": args.crash_every})
            faults = f"SIGKILL every {args.crash_every:.0f} s"
        elif name == "outage":
            third = args.duration / 3
            outages = (
                ("apiserver", third - args.outage / 2, args.outage),
                ("etcd", 2 * third - args.outage / 2, args.outage),
            )
            plan = Plan(**{**base.__dict__, "outages": outages})
            faults = f"apiserver stopped {args.outage:.0f} s, etcd stopped {args.outage:.0f} s"
        else:
            raise SystemExit(f"unknown scenario {name!r}")
        work = Path(tempfile.mkdtemp(prefix=f"nftproxy-churn-{name}-"))
        with ControlPlane() as cp:
            res = run(cp, plan, work)
        print(f"== {name} (logs in {work})")
        print(json.dumps(res.summary(), indent=1), flush=True)
        for key, value in res.summary().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                figure(key, value, "", scenario=name)
        if res.notes:
            print("notes:", res.notes)
        rows.append(line(name, res, faults))
    print("| test | load | faults | failed connections | lost updates | event -> kernel | sync failures | RSS growth |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
