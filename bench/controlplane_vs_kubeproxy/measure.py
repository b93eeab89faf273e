"""One measured run: P proxies of one kind started together, then the stream at one rate."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from bench.controlplane_vs_kubeproxy.results import Run
from bench.runners import METRICS, NODE, KubeProxyRunner, NftproxyRunner, Runner
from bench.slicechurn.api import Writer
from bench.slicechurn.forwarder import CountingForwarder, kubeconfig_via
from bench.slicechurn.stream import stream
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import wait_synced
from testkit.lab.netlab import bare_netns
from testkit.process import cpu_user_system, rss_mb

NONE = "none"  # the kind without proxies: the writes alone
STATUS_PERIOD = "5s"  # nftproxy's ProxyStatus writes: the chart's default statusPeriod


def node_name(k: int) -> str:
    return f"{NODE}-{k}"


def control_plane_cpu(cp: ControlPlane) -> tuple[float, float]:
    """CPU seconds (user + system) so far of kube-apiserver and of etcd."""
    pids = cp.pids
    return sum(cpu_user_system(pids["kube-apiserver"])), sum(cpu_user_system(pids["etcd"]))


def _runner(kind: str, netns: str, kubeconfig: Path, wd: Path, node: str) -> Runner:
    shim = cast(ControlPlane, argparse.Namespace(kubeconfig=kubeconfig))
    if kind == "kube-proxy":
        return KubeProxyRunner(netns, shim, wd, node=node)
    return NftproxyRunner(netns, shim, wd, node=node, status_period=STATUS_PERIOD)


def measure(cp: ControlPlane, kind: str, rate: float, args: argparse.Namespace, work: Path, run_number: int) -> Run:
    """Start ``args.proxies`` proxies of ``kind`` (none for NONE), each in its own namespace with
    its own counting forwarder and Node; wait until each has synced; then the stream at ``rate``
    for ``args.duration`` s. The control plane's CPU is read around the starts and the churn."""
    run = Run(kind, rate, 0 if kind == NONE else args.proxies)
    apiserver = cp.pids["kube-apiserver"]
    wd = work / f"{kind}-{rate:g}"
    wd.mkdir()
    port = urlsplit(cp.server).port or 443
    with contextlib.ExitStack() as stack:
        runners: list[tuple[str, Runner]] = []
        fwds: list[CountingForwarder] = []
        for k in range(run.proxies):
            fwd = CountingForwarder(args.forward_port + run_number * args.proxies + k, ("127.0.0.1", port))
            stack.callback(fwd.close)
            fwds.append(fwd)
            netns = stack.enter_context(bare_netns(args.netns_prefix))
            subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
            (wd / str(k)).mkdir()
            kubeconfig = kubeconfig_via(cp.kubeconfig, fwd.port, wd / str(k) / "via-counter.kubeconfig")
            runners.append((netns, _runner(kind, netns, kubeconfig, wd / str(k), node_name(k))))
        for _, runner in runners:
            stack.callback(runner.stop)
        # idle: the control plane with nothing running but itself
        a0, e0 = control_plane_cpu(cp)
        time.sleep(args.idle)
        a1, e1 = control_plane_cpu(cp)
        run.idle_seconds, run.idle_apiserver_s, run.idle_etcd_s = args.idle, a1 - a0, e1 - e0
        # the starts: every proxy at once (a DaemonSet's first rollout, a cluster's restart)
        t0, wall0 = time.perf_counter(), time.time()
        for _, runner in runners:
            runner.start()
        with ThreadPoolExecutor(max(1, len(runners))) as pool:  # together: the window ends with the last one
            waits = [
                pool.submit(wait_synced, netns, *METRICS, runner.prefix, since=wall0, timeout=args.timeout, quiet=3.0)
                for netns, runner in runners
            ]
            for w in waits:
                w.result()
        a2, e2 = control_plane_cpu(cp)
        run.start_seconds = time.perf_counter() - t0
        run.start_apiserver_s, run.start_etcd_s = a2 - a1, e2 - e1
        run.start_bytes = [f.counts()[0] for f in fwds]
        time.sleep(2)
        # the churn
        pids = [runner.pid() for _, runner in runners]
        p0 = sum(sum(cpu_user_system(pid)) for pid in pids)
        a3, e3 = control_plane_cpu(cp)
        b0 = [f.counts()[0] for f in fwds]
        run.apiserver_rss_start = rss_mb(apiserver)
        run.load = (os.getloadavg()[0], 0.0)
        writer = Writer(cp, rate)
        run.seconds = writer.run(stream(args.services, max(1, round(rate)), args.seed), args.duration, lambda _: None)
        a4, e4 = control_plane_cpu(cp)
        b1 = [f.counts()[0] for f in fwds]
        run.proxies_cpu_s = sum(sum(cpu_user_system(runner.pid())) for _, runner in runners) - p0
        run.apiserver_rss_end = rss_mb(apiserver)
        run.load = (run.load[0], os.getloadavg()[0])
        run.apiserver_s, run.etcd_s = a4 - a3, e4 - e3
        run.churn_bytes = [y - x for x, y in zip(b0, b1, strict=True)]
        run.writes, run.failures, run.late = writer.writes, writer.failures, writer.late
    return run
