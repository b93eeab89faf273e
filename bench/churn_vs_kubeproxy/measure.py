"""One measured run: one proxy in a fresh namespace under the stream at one rate."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

from bench.apiserver import cluster_ip
from bench.churn_vs_kubeproxy.results import Run, metric_sum
from bench.churn_vs_kubeproxy.watch import AddressWatch
from bench.runners import METRICS, KubeProxyRunner, NftproxyRunner, Runner
from bench.slicechurn.api import Writer
from bench.slicechurn.forwarder import CountingForwarder, kubeconfig_via
from bench.slicechurn.stream import stream
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_get_in, parse_metrics, wait_synced
from testkit.lab.netlab import bare_netns
from testkit.lab.nftwatch import ElementWatch, service_key
from testkit.process import cpu_user_system, rss_mb


def metrics_in(netns: str) -> dict[str, float]:
    status, body = http_get_in(netns, *METRICS, "/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"/metrics: {status}")
    return parse_metrics(body)


def measure(
    cp: ControlPlane,
    proxy: str,
    rate: float,
    services: int,
    duration: float,
    work: Path,
    args: argparse.Namespace,
    seed: int,
    profile: Path | None = None,
    run_number: int = 0,
) -> Run:
    run = Run(proxy, rate)
    cls: type[Runner] = KubeProxyRunner if proxy == "kube-proxy" else NftproxyRunner
    wd = work / f"{proxy}-{rate:g}{'-profile' if profile else ''}"
    wd.mkdir()
    fwd = CountingForwarder(args.forward_port + run_number, ("127.0.0.1", urlsplit(cp.server).port or 443))
    shim = argparse.Namespace(kubeconfig=kubeconfig_via(cp.kubeconfig, fwd.port, wd / "via-counter.kubeconfig"))
    try:
        with bare_netns(args.netns_prefix) as netns:
            subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
            runner = cls(netns, cast(ControlPlane, shim), wd)  # type: ignore[call-arg]
            try:
                with ElementWatch(netns) as ew:
                    key = service_key(cluster_ip(services - 1), "tcp", 80)
                    ew.expect("service-ips", key)
                    t0, wall0 = time.perf_counter(), time.time()
                    env = os.environ.copy()
                    if proxy.startswith("nftproxy@"):  # e.g. nftproxy@0s: another --min-sync-period (from its env)
                        os.environ["NFTPROXY_MIN_SYNC_PERIOD"] = proxy.partition("@")[2]
                    try:
                        runner.start()
                    finally:
                        os.environ.clear()
                        os.environ.update(env)
                    run.first_sync = ew.wait("service-ips", key, args.timeout) - t0
                wait_synced(netns, *METRICS, runner.prefix, since=wall0, timeout=args.timeout, quiet=3.0)
                time.sleep(2)
                pid = runner.pid()
                spy = None
                if profile is not None:
                    spy = subprocess.Popen(
                        [os.environ.get("PY_SPY", "py-spy"), "record", "-p", str(pid), "-r", "100", "--nonblocking",
                         "-f", "raw", "-o", str(profile), "-d", str(int(duration))],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    )  # fmt: skip
                m0 = metrics_in(netns)
                u0, s0 = cpu_user_system(pid)
                b0 = fwd.counts()
                run.rss_start = run.rss_peak = rss_mb(pid)
                run.load = (os.getloadavg()[0], 0.0)
                with AddressWatch(netns) as aw:
                    writer = Writer(cp, rate, aw)
                    next_rss = [10.0]

                    def tick(elapsed: float) -> None:
                        if elapsed >= next_rss[0]:
                            run.rss_peak = max(run.rss_peak, rss_mb(pid))
                            next_rss[0] += 10.0

                    run.seconds = writer.run(stream(services, max(1, round(rate)), seed), duration, tick)
                    u1, s1 = cpu_user_system(runner.pid())
                    b1 = fwd.counts()
                    run.rss_end = rss_mb(pid)
                    run.rss_peak = max(run.rss_peak, run.rss_end)
                    run.load = (run.load[0], os.getloadavg()[0])
                    m1 = metrics_in(netns)
                    deadline = time.monotonic() + 15  # the last writes' syncs
                    while aw.pending() and time.monotonic() < deadline:
                        time.sleep(0.2)
                    run.overruns = aw.overruns
                    sent, seen = dict(writer.sent), dict(aw.seen)
                run.writes, run.failures, run.late = writer.writes, writer.failures, writer.late
                run.user_s, run.system_s = u1 - u0, s1 - s0
                run.bytes_down, run.bytes_up = b1[0] - b0[0], b1[1] - b0[1]
                run.bytes_start, run.bytes_total = b0[0], b1[0]  # the forwarder counts from the proxy's start
                name = "kubeproxy_sync_proxy_rules_duration_seconds"
                run.syncs = metric_sum(m1, name + "_count", "IPv4") - metric_sum(m0, name + "_count", "IPv4")
                run.syncs_all = metric_sum(m1, name + "_count") - metric_sum(m0, name + "_count")
                run.sync_seconds = metric_sum(m1, name + "_sum", "IPv4") - metric_sum(m0, name + "_sum", "IPv4")
                npd = "kubeproxy_network_programming_duration_seconds"
                run.npd_sum = metric_sum(m1, npd + "_sum") - metric_sum(m0, npd + "_sum")
                run.npd_count = metric_sum(m1, npd + "_count") - metric_sum(m0, npd + "_count")
                run.awaited = len(sent)
                run.latencies = [seen[n] - t for n, t in sent.items() if n in seen]
                run.missed = run.awaited - len(run.latencies)
                if spy is not None:
                    try:
                        _, err = spy.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        spy.kill()
                        _, err = spy.communicate()
                    if spy.returncode:
                        print(f"  py-spy exit {spy.returncode}: {err.decode(errors='replace')[-500:]}", flush=True)
            finally:
                runner.stop()
    finally:
        fwd.close()
    return run
