"""Maglev against source-hash: clients moved by a change of one endpoint, and what a table of M
slots per frontend costs nftables. Run: ``python -m bench maglev`` (``--quick``: 1k Services).

* disruption (pure, no kernel): the share of clients whose endpoint changes when one endpoint is
  added to N (and one of N + 1 removed), for tables of 251, 1021, 2039 and 4093 slots (the mean
  and the worst of 30 random endpoint sets each), and for source-hash as the kernel computes it
  (``jhash … mod N`` is ``hash * N >> 32``: N ranges of the hash). tests/netns/test_maglev.py
  measures the same with real packets.
* cost, in a fresh network namespace each, in a fresh process each (peak RSS its own): a full
  sync at S Services x 10 endpoints (20% NodePorts) all maglev (251 slots) against all
  source-hash: elements, seconds; and one Service's endpoint replaced (one out, one in), synced
  alone: seconds and elements sent.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from ipaddress import ip_address, ip_network
from typing import Any

from bench.figures import figure
from bench.workload import endpoint_slice, service
from nftproxy.compiler import ProxyConfig, maglev
from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.fragment import compile_fragment
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.conntrack import KernelConntrack
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from nftproxy.nft.transaction import Transaction
from testkit.disruption import slots_moved, source_hash_moved
from testkit.lab.netlab import bare_netns

CONFIG = ProxyConfig(
    node_name="node-1",
    node_ips=(ip_address("198.18.0.1"),),
    cluster_cidrs=(ip_network("10.128.0.0/10"),),
)
NETNS_PREFIX = ["mgb"]
TABLE_SIZES = (251, 1021, 2039, 4093)


# -- disruption ---------------------------------------------------------------------------------


def disruption(ns: tuple[int, ...], trials: int) -> None:
    rng = random.Random(7)
    print(f"clients moved by one endpoint added to N / removed from N + 1 (mean and worst of {trials} endpoint sets)")
    print(f"{'algorithm':<22}{'N':>4}{'add mean':>10}{'add max':>9}{'rm mean':>9}{'rm max':>8}   (x 1/N)")
    for n in ns:
        sets = [
            [(f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}", "8080") for _ in range(n + 1)]
            for _ in range(trials)
        ]
        rows: list[tuple[str, list[float], list[float]]] = []
        adds = [source_hash_moved([a for a, _ in e[:n]], [a for a, _ in e]) for e in sets]
        rms = [source_hash_moved([a for a, _ in e], [a for a, _ in e[1:]]) for e in sets]
        rows.append(("source-hash", adds, rms))
        for m in TABLE_SIZES:
            adds = [slots_moved(maglev.table(e[:n], m), maglev.table(e, m)) for e in sets]
            rms = [slots_moved(maglev.table(e, m), maglev.table(e[1:], m)) for e in sets]
            rows.append((f"maglev M={m}", adds, rms))
        for label, adds, rms in rows:
            for what, vals in (("add", adds), ("remove", rms)):
                figure(f"clients moved, one endpoint {what} (mean)", statistics.mean(vals) * n, "1/N",
                       algorithm=label, endpoints=n)  # fmt: skip
                figure(f"clients moved, one endpoint {what} (max)", max(vals) * n, "1/N", algorithm=label,
                       endpoints=n)  # fmt: skip
            print(f"{label:<22}{n:>4}{statistics.mean(adds) * n:>10.2f}{max(adds) * n:>9.2f}"
                  f"{statistics.mean(rms) * n:>9.2f}{max(rms) * n:>8.2f}", flush=True)  # fmt: skip
    print("(the least a change can move: 1/(N + 1) of the clients, 0.91/N at N = 10)")


# -- cost ---------------------------------------------------------------------------------------


def _cluster(services: int, endpoints: int, algorithm: str) -> tuple[list[Service], list[EndpointSlice]]:
    svcs = [replace(service(i, node_port=i < services // 5), load_balancing=algorithm) for i in range(services)]
    return svcs, [endpoint_slice(i, endpoints) for i in range(services)]


def _feed(dp: Dataplane, svcs: list[Service], slices: list[EndpointSlice]) -> None:
    for s in svcs:
        dp.inputs.set_service(s)
    for sl in slices:
        dp.inputs.set_slice(sl)


def cost(services: int, endpoints: int, algorithm: str, rounds: int) -> dict[str, Any]:
    svcs, slices = _cluster(services, endpoints, algorithm)
    alone = Dataplane(FakeBackend(), CONFIG)
    start = time.perf_counter()
    _feed(alone, svcs, slices)
    alone.compile()
    compiled = time.perf_counter() - start
    elements = sum(a.element_count() for a in alone.assemblies.values())
    del alone
    maglev.clear_cache()  # the synced run computes its tables too
    out: dict[str, Any] = {"compile": compiled, "elements": elements}
    with bare_netns(NETNS_PREFIX[0]) as ns:
        backend, ct = KernelBackend(ns), KernelConntrack(ns)
        backend.run("list tables")
        start = time.perf_counter()
        dp = Dataplane(backend, CONFIG, ct)
        _feed(dp, svcs, slices)
        dp.sync()
        out["total"] = time.perf_counter() - start
        sent: list[int] = []
        apply = backend.apply

        def counting(*txs: Transaction) -> None:
            sent.append(sum(tx.element_changes() for tx in txs))
            apply(*txs)

        backend.apply = counting  # type: ignore[method-assign]
        times = []
        for r in range(rounds):
            i = (r * 7919) % services
            t0 = time.perf_counter()
            dp.inputs.set_slice(endpoint_slice(i, endpoints, generation=1))  # one endpoint out, one in
            result = dp.sync()
            times.append(time.perf_counter() - t0)
            assert not result.full
        backend.close()
        ct.close()
    out["partial_median"] = statistics.median(times)
    out["partial_p99"] = sorted(times)[max(0, int(len(times) * 0.99) - 1)]
    out["partial_elements"] = statistics.median(sent) if sent else 0
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def elements(services: int, endpoints: int, rounds: int) -> None:
    """The compiler alone (no kernel): elements of the whole table, compile time, and elements a
    one-Service sync sends (one endpoint out, one in), source-hash against maglev."""
    print(f"compiled alone (no kernel), {services} Services x {endpoints} endpoints, 20% NodePorts")
    print(f"{'algorithm':<22}{'elements':>10}{'compile s':>11}{'1-Svc sync elements (median, max)':>36}")
    for algorithm in ("source-hash", "maglev"):
        svcs, slices = _cluster(services, endpoints, algorithm)
        a = Assembly(Family.IP, CONFIG)
        a.tracking = False
        maglev.clear_cache()
        start = time.perf_counter()
        for s, sl in zip(svcs, slices, strict=True):
            a.put(s.key, compile_fragment(s, [sl], Family.IP, CONFIG))
        compiled = time.perf_counter() - start
        count = a.element_count()
        a.commit()
        a.tracking = True
        sent = []
        for r in range(rounds):
            i = (r * 7919) % services
            a.put(
                svcs[i].key, compile_fragment(svcs[i], [endpoint_slice(i, endpoints, generation=1)], Family.IP, CONFIG)
            )
            sent.append(a.delta().element_changes())
            a.commit()
        label = "maglev (M=251)" if algorithm == "maglev" else algorithm
        figure("elements", count, "elements", algorithm=label, services=services)
        figure("compile alone", compiled, "s", algorithm=label, services=services)
        figure("one-Service sync elements", statistics.median(sent), "elements", algorithm=label, services=services)
        print(f"{label:<22}{count:>10}{compiled:>11.2f}{statistics.median(sent):>26.0f}, {max(sent)}", flush=True)


def run_child(services: int, endpoints: int, algorithm: str, rounds: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.maglev", "--one", str(services), str(endpoints), algorithm, str(rounds)]
    cmd += ["--netns-prefix", NETNS_PREFIX[0]]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--one", nargs=4, metavar=("SERVICES", "ENDPOINTS", "ALGORITHM", "ROUNDS"))
    p.add_argument("--quick", action="store_true", help="1k Services, fewer trials")
    p.add_argument("--services", type=int, help="Services of the cost rows (default 10000)")
    p.add_argument("--rounds", type=int, default=30, help="one-Service syncs per row (default 30)")
    p.add_argument("--netns-prefix", default="mgb")
    p.add_argument("--elements", action="store_true", help="only: the compiler's figures at --services (no kernel)")
    args = p.parse_args()
    NETNS_PREFIX[0] = args.netns_prefix
    if args.one:
        s, e, algorithm, r = args.one
        print(json.dumps(cost(int(s), int(e), algorithm, int(r))))
        return 0
    n = args.services or (1000 if args.quick else 10000)
    if args.elements:
        elements(n, 10, args.rounds)
        return 0
    disruption((3, 10, 30), 10 if args.quick else 30)
    print(f"\ncost at {n} Services x 10 endpoints, 20% NodePorts, every Service the same algorithm")
    print(f"{'algorithm':<22}{'elements':>10}{'compile s':>11}{'full sync s':>13}{'peak RSS MB':>13}"
          f"{'1-Svc sync ms':>15}{'p99 ms':>8}{'elements':>10}")  # fmt: skip
    for algorithm in ("source-hash", "maglev"):
        r = run_child(n, 10, algorithm, args.rounds)
        label = "maglev (M=251)" if algorithm == "maglev" else algorithm
        for what, unit, value in (
            ("elements", "elements", r["elements"]), ("compile", "s", r["compile"]), ("full sync", "s", r["total"]),
            ("peak RSS", "MB", r["peak_rss_mb"]), ("one-Service sync median", "s", r["partial_median"]),
            ("one-Service sync p99", "s", r["partial_p99"]), ("one-Service sync elements", "elements",
            r["partial_elements"]),
        ):  # fmt: skip
            figure(what, value, unit, algorithm=label, services=n)
        print(f"{label:<22}{r['elements']:>10}{r['compile']:>11.2f}{r['total']:>13.2f}{r['peak_rss_mb']:>13.0f}"
              f"{r['partial_median'] * 1000:>15.2f}{r['partial_p99'] * 1000:>8.2f}{r['partial_elements']:>10.0f}",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
