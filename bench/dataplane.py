"""Benchmark of the dataplane (issue: Service dataplane). Run: ``.venv/bin/python -m bench.dataplane``.

Each measurement runs in a fresh network namespace created and deleted here, and each size in a
fresh Python process so that peak memory is its own. Figures are medians. The comparison with the
real kube-proxy is bench/vs_kubeproxy.py (first sync, event to kernel) and bench/datapath.py
(packets).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from dataclasses import replace
from ipaddress import ip_address, ip_network
from typing import Any

from bench.figures import figure
from bench.workload import cluster, endpoint_slice
from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.conntrack import KernelConntrack
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from testkit.lab.netlab import bare_netns

CONFIG = ProxyConfig(
    node_name="node-1",
    node_ips=(ip_address("198.18.0.1"),),
    cluster_cidrs=(ip_network("10.128.0.0/10"),),
)


def feed(dp: Dataplane, svcs: list[Service], slices: list[EndpointSlice]) -> None:
    for s in svcs:
        dp.inputs.set_service(s)
    for sl in slices:
        dp.inputs.set_slice(sl)


NETNS_PREFIX = ["ntb"]  # --netns-prefix: the namespaces are named PREFIX-<random>


def fresh_netns() -> AbstractContextManager[str]:
    return bare_netns(NETNS_PREFIX[0])


def full_sync(
    services: int, endpoints: int, nodeports: int, mix: bool = False, lb: bool = False, config: ProxyConfig = CONFIG
) -> dict[str, float]:
    """Compile + commit of the whole table into an empty namespace (what a first start does).

    ``total``: from the inputs to the table committed (a big first load compiles in chunks while
    the kernel loads the previous one). ``compile``: the same compile alone, no kernel (for the
    breakdown; not part of ``total``)."""
    svcs, slices = cluster(services, endpoints, nodeports=nodeports, mix=mix, lb=lb)
    alone = Dataplane(FakeBackend(), config)
    start = time.perf_counter()
    feed(alone, svcs, slices)
    alone.compile()
    compiled = time.perf_counter() - start
    del alone
    with fresh_netns() as ns:
        backend, ct = KernelBackend(ns), KernelConntrack(ns)
        backend.run("list tables")  # open the netlink socket outside the timing
        start = time.perf_counter()
        dp = Dataplane(backend, config, ct)
        feed(dp, svcs, slices)
        dp.sync()
        done = time.perf_counter()
        backend.close()
        ct.close()
    return {"compile": compiled, "total": done - start}


def incremental(services: int, endpoints: int, rounds: int) -> list[float]:
    """One Service's endpoints change (one replaced), then sync: event to committed, in seconds."""
    svcs, slices = cluster(services, endpoints)
    times = []
    with fresh_netns() as ns:
        backend, ct = KernelBackend(ns), KernelConntrack(ns)
        dp = Dataplane(backend, CONFIG, ct)
        feed(dp, svcs, slices)
        dp.sync()
        for r in range(rounds):
            i = (r * 7919) % services
            start = time.perf_counter()
            dp.inputs.set_slice(endpoint_slice(i, endpoints, generation=r + 1))
            result = dp.sync()
            times.append(time.perf_counter() - start)
            assert not result.full
        backend.close()
        ct.close()
    return times


def one(kind: str, services: int, endpoints: int, repeat: int) -> dict[str, Any]:
    """Run one measurement in this process and report it with this process's peak RSS."""
    out: dict[str, Any] = {"kind": kind, "services": services, "endpoints": endpoints}
    if kind in ("full", "mix", "lb", "counters"):
        config = replace(CONFIG, service_counters=kind == "counters")
        runs = [
            full_sync(services, endpoints, nodeports=services // 5, mix=kind == "mix", lb=kind == "lb", config=config)
            for _ in range(repeat)
        ]
        out["total"] = statistics.median(r["total"] for r in runs)
        out["compile"] = statistics.median(r["compile"] for r in runs)
    elif kind == "incremental":
        times = incremental(services, endpoints, rounds=repeat)
        out["median"] = statistics.median(times)
        out["p99"] = sorted(times)[int(len(times) * 0.99) - 1]
    else:
        raise ValueError(f"unknown kind {kind!r}")
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(kind: str, services: int, endpoints: int, repeat: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.dataplane", "--one", kind, str(services), str(endpoints), str(repeat)]
    cmd += ["--netns-prefix", NETNS_PREFIX[0]]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def row(label: str, n: int, r: dict[str, Any]) -> None:
    for what, unit in (("compile", "s"), ("total", "s"), ("peak_rss_mb", "MB")):
        figure(what, r[what], unit, layout=label.strip(), services=n)
    print(f"{label:<34}{n:>9}{r['compile']:>11.3f}{r['total']:>10.3f}{r['peak_rss_mb']:>13.0f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--one", nargs=4, metavar=("KIND", "SERVICES", "ENDPOINTS", "REPEAT"))
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats (smoke run)")
    p.add_argument("--balancing", action="store_true", help="only: plain vs 10%% round-robin + 10%% source-hash")
    p.add_argument(
        "--sizes", help="Services, comma-separated: full and one-Service syncs at these sizes only (no policy mix)"
    )
    p.add_argument("--repeat", type=int, help="full syncs per size (default 5, 3 from 30k on)")
    p.add_argument("--counters", action="store_true", help="only: without vs with --service-counters")
    p.add_argument("--rounds", type=int, default=50, help="one-Service syncs per size (default 50)")
    p.add_argument("--netns-prefix", default="ntb", help="name the network namespaces PREFIX-<random> (default ntb)")
    args = p.parse_args()
    NETNS_PREFIX[0] = args.netns_prefix
    if args.one:
        kind, s, e, r = args.one
        print(json.dumps(one(kind, int(s), int(e), int(r))))
        return 0
    if args.balancing:
        return balancing(3000 if args.quick else 10000, 1 if args.quick else 5)
    if args.counters:
        return service_counters(3000 if args.quick else 10000, args.repeat or (1 if args.quick else 5))
    sizes = [1000, 3000] if args.quick else [1000, 10000, 30000, 50000]
    inc_sizes = [3000] if args.quick else [10000, 50000]
    if args.sizes:
        sizes = inc_sizes = [int(n) for n in args.sizes.split(",")]
    repeat = 1 if args.quick else 5  # this host is noisy: medians of 5 (3 at 30k and more)
    print("nftproxy dataplane benchmark (Services x 10 endpoints, 20% NodePorts; medians)")
    print(f"{'layout':<34}{'Services':>9}{'compile s':>11}{'total s':>10}{'peak RSS MB':>13}")
    full: dict[int, float] = {}
    for n in sizes:
        r = run_child("full", n, 10, args.repeat or (repeat if n < 30000 else max(1, repeat - 2)))
        full[n] = r["total"]
        row("nftproxy full sync", n, r)
    mix_n = 3000 if args.quick else 10000
    if not args.sizes:
        r = run_child("mix", mix_n, 10, repeat)
        mix_total = r["total"]
        row("nftproxy full sync, policy mix (*)", mix_n, r)
    print()
    for inc_n in inc_sizes:
        r = run_child("incremental", inc_n, 10, args.rounds)
        for what in ("median", "p99"):
            figure(f"one-Service sync {what}", r[what], "s", services=inc_n)
        print(
            f"incremental: one Service's endpoint replaced at {inc_n} Services: "
            f"median {r['median'] * 1000:.2f} ms, p99 {r['p99'] * 1000:.2f} ms ({args.rounds} rounds), "
            f"peak RSS {r['peak_rss_mb']:.0f} MB"
        )
    if not args.sizes:
        print("(*) 10% sessionAffinity ClientIP, 10% externalTrafficPolicy Local LoadBalancers, 5% with source ranges")
    print("\nratios (same run):")
    if not args.sizes and mix_n in full:
        print(f"  policy mix / plain at {mix_n} Services: {mix_total / full[mix_n]:.2f}x")
    if 1000 in full and 10000 in full:
        print(f"  nftproxy 10k / 1k: {full[10000] / full[1000]:.1f}x (linear would be 10x)")
    if 10000 in full and 30000 in full:
        print(f"  nftproxy 30k / 10k: {full[30000] / full[10000]:.1f}x (linear would be 3x)")
    if 10000 in full and 50000 in full:
        print(f"  nftproxy 50k / 10k: {full[50000] / full[10000]:.1f}x (linear would be 5x)")
    if 10000 in full and 100000 in full:
        print(f"  nftproxy 100k / 10k: {full[100000] / full[10000]:.1f}x (linear would be 10x)")
    return 0


def service_counters(n: int, repeat: int) -> int:
    """Full sync at n Services without and with --service-counters: one sync per process,
    the two alternating (this host is noisy), medians."""
    print(f"--service-counters at {n} Services x 10 endpoints, 20% NodePorts (medians of {repeat}, alternating)")
    print(f"{'layout':<34}{'Services':>9}{'compile s':>11}{'total s':>10}{'peak RSS MB':>13}")
    runs: dict[str, list[dict[str, Any]]] = {"full": [], "counters": []}
    for _ in range(repeat):
        for kind, done in runs.items():
            done.append(run_child(kind, n, 10, 1))
    med = {
        kind: {what: statistics.median(r[what] for r in rs) for what in ("compile", "total", "peak_rss_mb")}
        for kind, rs in runs.items()
    }
    row("nftproxy full sync", n, med["full"])
    row("with --service-counters", n, med["counters"])
    off, on = med["full"], med["counters"]
    print(
        f"  with / without counters at {n} Services: total {on['total'] / off['total']:.3f}x, "
        f"compile {on['compile'] / off['compile']:.3f}x, peak RSS {on['peak_rss_mb'] / off['peak_rss_mb']:.3f}x"
    )
    return 0


def balancing(n: int, repeat: int) -> int:
    """Full sync at n Services: plain, then 10% round-robin + 10% source-hash, alternating runs."""
    print(f"load-balancing algorithms at {n} Services x 10 endpoints, 20% NodePorts (medians of {repeat})")
    print(f"{'layout':<34}{'Services':>9}{'compile s':>11}{'total s':>10}{'peak RSS MB':>13}")
    plain = run_child("full", n, 10, repeat)
    row("nftproxy full sync, random", n, plain)
    lb = run_child("lb", n, 10, repeat)
    row("10% round-robin + 10% source-hash", n, lb)
    print(
        f"  algorithms / plain at {n} Services: {lb['total'] / plain['total']:.2f}x "
        f"(compile {lb['compile'] / plain['compile']:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
