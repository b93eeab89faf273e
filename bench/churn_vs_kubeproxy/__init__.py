"""CPU, memory, latency and API bytes under EndpointSlice churn: nftproxy against kube-proxy.

    flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench churn_vs_kubeproxy
        [--services 10000] [--rates 20,100] [--duration 300] [--proxies kube-proxy,nftproxy]
        [--profile-seconds 60] [--netns-prefix chb] [--forward-port 46100]

One kube-apiserver on loopback holds N Services x 10 endpoints (written into etcd as the API
stores them: bench.apiserver.import_many). For each rate, each proxy in turn (its default
``--min-sync-period`` 1 s, periodic 30 s) runs in a fresh network namespace against the SAME
stream of EndpointSlice writes: before each run the slices are put back as they were (into
etcd), the stream is drawn from the same seed, so both proxies see the same bodies in the same
order (only the trigger-time annotation differs).

The stream is rolling Deployments: RATE Services roll at once (RATE writes/s spread over them,
so each gets about one write a second); each pod replacement is three writes of its slice,
(1) a new pod's endpoint, not ready; (2) it turns ready and the oldest pod turns terminating
(ready false, serving true, terminating true); (3) the terminating endpoint is gone. After its
10 pods are replaced a Service hands its place to the next. Every write sets
``endpoints.kubernetes.io/last-change-trigger-time`` to the time it is sent (RFC 3339, UTC).

Measured over the churn (from its first write to its last):

* CPU seconds per minute of the proxy process, user and system apart (its own,
  plus that of reaped children and of children still running, testkit.process.cpu_user_system:
  kube-proxy's ``nft`` runs); kube-proxy's in-namespace API forwarder (testkit.lab.nsforward)
  and the counting forwarder below are not counted, nor the apiserver or etcd;
* RSS (VmRSS) of the proxy process at the start and end of the churn, and its peak (sampled
  every 10 s);
* network programming latency p50/p99: from a write (2)'s trigger time to the kernel's
  notification of the first nftables object carrying the newly ready address (a NETLINK_NETFILTER
  socket in the namespace, subscribed to the nftables group: nftproxy's endpoint-map element,
  kube-proxy's endpoint chain's rule and its service chain's vmap element; all of one
  transaction are notified at its commit). A write whose address never shows is counted apart;
* syncs: the delta of ``kubeproxy_sync_proxy_rules_duration_seconds_count`` (both export it);
  also both proxies' own ``kubeproxy_network_programming_duration_seconds`` sum/count;
* bytes the proxy received from the apiserver per minute: the proxy's kubeconfig points at a
  counting TCP forwarder on 127.0.0.1:``--forward-port`` in this namespace (bytes as they leave
  the apiserver: TLS records, HTTP/2 frames for kube-proxy, HTTP/1.1 chunks for nftproxy).

Measured from the proxy's start: its first sync (the last Service's element in the kernel) and
the bytes from the apiserver from its start to the churn's end, its initial lists included (the
headline bytes figure; the bytes before the churn apart). The report gives nftproxy's ratio to
kube-proxy's at the same rate for CPU (user + system per minute of churn), those bytes and the
peak RSS, and the RSS change over the churn (end against start, %).

``--profile-seconds S`` adds one more nftproxy run at the highest rate for S seconds with
``py-spy record`` (``$PY_SPY`` or ``py-spy`` on PATH) attached, not measured, and prints where
its CPU went by category (JSON decode, kopf + aiohttp, parse, compile, netlink, ...).
Network namespaces are named ``<--netns-prefix>-<random>`` and deleted after.
"""

# The modules: bench.slicechurn's stream (the writes, pure), api (sending them; the slices put
# back; sizes) and forwarder (counting the proxy's bytes from the apiserver); here, watch (when an
# address shows in the kernel), measure (one run), results (its figures and the report), profile
# (py-spy's stacks).

from __future__ import annotations

import argparse
import compileall
import itertools
import os
import shutil
import tempfile
import time
from pathlib import Path

import nftproxy
from bench.apiserver import import_many, prepare
from bench.churn_vs_kubeproxy.measure import measure
from bench.churn_vs_kubeproxy.profile import print_profile
from bench.churn_vs_kubeproxy.results import Run, or_dash, pct, ratios, report
from bench.figures import figure
from bench.runners import NODE, kube_proxy_version
from bench.slicechurn.api import object_sizes, reset_slices
from bench.slicechurn.stream import ENDPOINTS, stream, touched
from testkit.k8s.controlplane import ControlPlane


def main() -> int:
    p = argparse.ArgumentParser(prog="bench.churn_vs_kubeproxy", description=__doc__)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--rates", default="20,100")
    p.add_argument("--duration", type=float, default=300.0)
    p.add_argument(
        "--proxies", default="kube-proxy,nftproxy", help="also nftproxy@PERIOD: nftproxy with --min-sync-period PERIOD"
    )
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--profile-seconds", type=float, default=0.0)
    p.add_argument("--netns-prefix", default="chb")
    p.add_argument("--forward-port", type=int, default=46100)
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--keep", action="store_true", help="keep the work directory (proxy logs)")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    proxies = args.proxies.split(",")
    version = kube_proxy_version()
    compileall.compile_dir(Path(nftproxy.__file__).parent, quiet=1)  # as installed (bench.vs_kubeproxy)
    work = Path(tempfile.mkdtemp(prefix="chb-"))
    print(f"kube-proxy {version} vs nftproxy under EndpointSlice churn: {args.services:,} Services x {ENDPOINTS}, "
          f"rates {args.rates}/s, {args.duration:g} s each; load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    runs: list[Run] = []
    try:
        with ControlPlane() as cp:
            prepare(cp, NODE)
            t0 = time.perf_counter()
            import_many(cp, 0, args.services, ENDPOINTS)
            print(f"  (imported {args.services} Services + slices in {time.perf_counter() - t0:.0f} s)", flush=True)
            dirty: set[int] = set()
            plan: list[tuple[float, str, Path | None]] = [(rate, proxy, None) for rate in rates for proxy in proxies]
            if args.profile_seconds:
                plan.append((max(rates), "nftproxy", work / "nftproxy.pyspy"))
            for k, (rate, proxy, prof) in enumerate(plan):
                if dirty:
                    reset_slices(cp, dirty)
                    time.sleep(2)
                seconds = args.profile_seconds if prof else args.duration
                dirty = touched(args.services, rate, seconds, args.seed)
                r = measure(cp, proxy, rate, args.services, seconds, work, args, args.seed, prof, k)
                if prof is not None:
                    print_profile(prof, r)
                    continue
                runs.append(r)
                if len(runs) == 1:
                    last = next(itertools.islice(stream(args.services, max(1, round(rate)), args.seed), 30, None))
                    sizes = object_sizes(cp, last.index)
                    print(f"  one churned EndpointSlice (s{last.index}-x) as the apiserver sends it: "
                          + ", ".join(f"{k} {v:,} B" for k, v in sizes.items()), flush=True)  # fmt: skip
                print(f"  {proxy} at {rate:g}/s: CPU user {r.per_min(r.user_s):.2f} + system "
                      f"{r.per_min(r.system_s):.2f} s/min, RSS {r.rss_start:.0f} -> {r.rss_end:.0f} MB, p50/p99 "
                      f"{or_dash(pct(r.latencies, .5))}/{or_dash(pct(r.latencies, .99))} s, {r.syncs:.0f} syncs, "
                      f"{r.per_min(r.bytes_down) / 1e6:.2f} MB/min in ({r.bytes_total / 1e6:.2f} MB from its start); "
                      f"load {r.load[0]:.2f}/{r.load[1]:.2f}",
                      flush=True)  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"  (work directory kept: {work})")
    report(runs, args.services, version)
    for r in runs:
        labels = {"services": args.services, "rate": r.rate, "proxy": r.proxy, "kube_proxy": version}
        figure("CPU user per minute", r.per_min(r.user_s), "s", **labels)
        figure("CPU system per minute", r.per_min(r.system_s), "s", **labels)
        figure("RSS start", r.rss_start, "MB", **labels)
        figure("RSS end", r.rss_end, "MB", **labels)
        figure("RSS peak", r.rss_peak, "MB", **labels)
        figure("RSS change over the churn", r.rss_change, "%", **labels)
        figure("latency p50", pct(r.latencies, 0.5), "s", **labels)
        figure("latency p99", pct(r.latencies, 0.99), "s", **labels)
        figure("syncs", r.syncs, "", **labels)
        figure("bytes from apiserver per minute", r.per_min(r.bytes_down), "B", **labels)
        figure("bytes from apiserver, start to churn end", r.bytes_total, "B", **labels)
        figure("bytes from apiserver before the churn", r.bytes_start, "B", **labels)
        figure("first sync", r.first_sync, "s", **labels)
        figure("churn seconds", r.seconds, "s", **labels)
        figure("writes per second achieved", r.writes / r.seconds, "1/s", **labels)
    for (rate, proxy), x in ratios(runs).items():
        labels = {"services": args.services, "rate": rate, "proxy": proxy, "kube_proxy": version}
        figure("CPU ratio to kube-proxy", x.cpu, "", **labels)
        figure("bytes ratio to kube-proxy", x.bytes, "", **labels)
        figure("RSS peak ratio to kube-proxy", x.rss, "", **labels)
    return 0
