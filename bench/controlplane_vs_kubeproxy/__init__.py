"""The control plane's cost of P proxies under EndpointSlice churn: nftproxy against kube-proxy.

    flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench controlplane_vs_kubeproxy
        [--proxies 10] [--services 1000] [--rates 20,100] [--duration 60] [--kinds none,kube-proxy,nftproxy]
        [--idle 10] [--netns-prefix cpb] [--forward-port 46300]

One kube-apiserver + etcd on loopback hold N Services x 10 endpoints (written into etcd as the API
stores them: bench.apiserver.import_many) and P Nodes. For each rate, each kind in turn (never two
at once): P proxies of that kind (kube-proxy from bench.runners.KubeProxyRunner, nftproxy from
NftproxyRunner with the chart's default ``--status-period`` 5 s; each with its own Node name, in
its own network namespace, its kubeconfig pointing at its own counting TCP forwarder on
127.0.0.1), started all at once and waited for until each has synced (its sync metrics quiet for
3 s); then the stream of EndpointSlice writes of churn_vs_kubeproxy (bench.slicechurn: rolling
Deployments) at RATE writes/s for ``--duration`` s. Before each run the slices are put back as
they were (into etcd) and the stream is drawn from the same seed: every kind sees the same
writes. The kind ``none`` starts no proxy: the apiserver serving the writes alone.

Measured, per run:

* the CPU seconds (user + system, testkit.process.cpu_user_system) of the kube-apiserver process
  and, apart, of etcd: over ``--idle`` s before the starts (nothing running but the control plane
  and the bench), over the starts (from the first start to the last proxy synced, all waited for
  at once: the P initial lists and first syncs; also less the idle rate over as long), and per
  minute of churn (from its first write to its last; it includes serving the writes themselves,
  which the ``none`` run measures alone: the table also gives the apiserver's CPU above it, per
  proxy);
* the bytes the apiserver sent to each proxy (its forwarder's count from the apiserver: TLS
  records, HTTP/2 frames for kube-proxy, HTTP/1.1 chunks for nftproxy): from its start to the
  last proxy synced, and per minute of churn; summed and per proxy;
* the proxies' own CPU over the churn (summed, children included), and the apiserver's RSS.

The report gives nftproxy's ratios to kube-proxy's at the same rate. Network namespaces are
named ``<--netns-prefix>-<random>`` and deleted after; the forwarders listen on
``--forward-port`` on, one port per proxy and run.
"""

# The modules: bench.slicechurn's stream (the writes, pure), api (sending them; the slices put
# back) and forwarder (counting each proxy's bytes from the apiserver); here, measure (one run)
# and results (its figures and the report).

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import tempfile
import time
from pathlib import Path

import nftproxy
from bench.apiserver import import_many, prepare
from bench.controlplane_vs_kubeproxy.measure import NONE, measure, node_name
from bench.controlplane_vs_kubeproxy.results import Run, per_proxy_above_writes, ratios, report
from bench.figures import figure
from bench.runners import kube_proxy_version
from bench.slicechurn.api import reset_slices
from bench.slicechurn.stream import ENDPOINTS, touched
from testkit.k8s.controlplane import ControlPlane


def main() -> int:
    p = argparse.ArgumentParser(prog="bench.controlplane_vs_kubeproxy", description=__doc__)
    p.add_argument("--proxies", type=int, default=10)
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--rates", default="20,100")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--kinds", default=f"{NONE},kube-proxy,nftproxy")
    p.add_argument("--idle", type=float, default=10.0, help="seconds of the control plane alone before each start")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--netns-prefix", default="cpb")
    p.add_argument("--forward-port", type=int, default=46300)
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--keep", action="store_true", help="keep the work directory (proxy logs)")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    kinds = args.kinds.split(",")
    if unknown := set(kinds) - {NONE, "kube-proxy", "nftproxy"}:
        p.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    version = kube_proxy_version()
    compileall.compile_dir(Path(nftproxy.__file__).parent, quiet=1)  # as installed (bench.vs_kubeproxy)
    work = Path(tempfile.mkdtemp(prefix="cpb-"))
    print(f"the control plane under {args.proxies} proxies of each kind (kube-proxy {version}, nftproxy): "
          f"{args.services:,} Services x {ENDPOINTS}, rates {args.rates}/s, {args.duration:g} s each; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    runs: list[Run] = []
    try:
        with ControlPlane() as cp:
            prepare(cp, *(node_name(k) for k in range(args.proxies)))
            t0 = time.perf_counter()
            import_many(cp, 0, args.services, ENDPOINTS)
            print(f"  (imported {args.services} Services + slices in {time.perf_counter() - t0:.0f} s)", flush=True)
            dirty: set[int] = set()
            for k, (rate, kind) in enumerate((rate, kind) for rate in rates for kind in kinds):
                if dirty:
                    reset_slices(cp, dirty)
                    time.sleep(2)
                dirty = touched(args.services, rate, args.duration, args.seed)
                r = measure(cp, kind, rate, args, work, k)
                runs.append(r)
                print(f"  {kind} at {rate:g}/s: apiserver CPU {r.per_min(r.apiserver_s):.2f} s/min over the churn, "
                      f"{r.start_apiserver_s:.2f} s for the {r.proxies} starts ({r.start_seconds:.1f} s); "
                      f"{r.bytes_per_min_per_proxy() / 1e3:.1f} KB/min per proxy, "
                      f"{r.start_bytes_per_proxy() / 1e3:.1f} KB per proxy for the start; "
                      f"load {r.load[0]:.2f}/{r.load[1]:.2f}", flush=True)  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"  (work directory kept: {work})")
    report(runs, args.services, version)
    above = per_proxy_above_writes(runs)
    for r in runs:
        labels = {"services": args.services, "rate": r.rate, "kind": r.kind, "proxies": r.proxies,
                  "kube_proxy": version}  # fmt: skip
        figure("apiserver CPU per minute of churn", r.per_min(r.apiserver_s), "s", **labels)
        figure("etcd CPU per minute of churn", r.per_min(r.etcd_s), "s", **labels)
        figure("apiserver CPU idle per minute", r.idle_per_min(), "s", **labels)
        figure("writes per second achieved", r.writes / r.seconds, "1/s", **labels)
        if not r.proxies:
            continue
        figure("apiserver CPU per minute of churn above the writes alone, per proxy", above.get((r.rate, r.kind)),
               "s", **labels)  # fmt: skip
        figure("apiserver CPU for the starts", r.start_apiserver_s, "s", **labels)
        figure("apiserver CPU for the starts above idle", r.start_above_idle(), "s", **labels)
        figure("etcd CPU for the starts", r.start_etcd_s, "s", **labels)
        figure("seconds to all synced", r.start_seconds, "s", **labels)
        figure("bytes to the proxies per minute of churn", r.per_min(sum(r.churn_bytes)), "B", **labels)
        figure("bytes per proxy per minute of churn", r.bytes_per_min_per_proxy(), "B", **labels)
        figure("bytes per proxy for its start", r.start_bytes_per_proxy(), "B", **labels)
        figure("proxies' CPU per minute of churn", r.per_min(r.proxies_cpu_s), "s", **labels)
    for (rate, kind), x in ratios(runs).items():
        labels = {"services": args.services, "rate": rate, "kind": kind, "proxies": args.proxies,
                  "kube_proxy": version}  # fmt: skip
        figure("apiserver CPU over the churn, ratio to kube-proxy", x.apiserver_churn, "", **labels)
        figure("apiserver CPU for the starts, ratio to kube-proxy", x.apiserver_start, "", **labels)
        figure("bytes per proxy over the churn, ratio to kube-proxy", x.bytes_churn, "", **labels)
        figure("bytes per proxy for its start, ratio to kube-proxy", x.bytes_start, "", **labels)
    return 0
