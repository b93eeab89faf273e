"""nftproxy against the real kube-proxy (nftables mode), side by side in one run.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.vs_kubeproxy [--sizes 1000,5000,10000]``.

The reference is whatever kube-proxy binary testkit finds (``$NFTPROXY_BIN``, else the
hack/k8s-tools.sh cache): the run prints the version that binary reports (``kube-proxy
--version``) in its first line and in the table's heading.

One kube-apiserver on loopback holds N Services x 10 endpoints (N = each size in turn, written
once into etcd and grown: bench.apiserver.import_many, the objects as the API stores them). For
each size, each proxy in turn gets a FRESH network namespace (nothing from the other) and is
measured:

* start -> first sync committed: from starting the process until the kernel notifies the
  ``service-ips`` element of the last Service (kube-proxy commits its first sync in one
  transaction; nftproxy's first load makes every Service reachable in its last commit);
* one Service created -> its rule in the kernel (and, printed beside it, how long the create call
  itself took: the kube-apiserver's part): its EndpointSlice is written first and synced,
  1.5 s later (past the 1 s min sync period) the Service is created; until the kernel notifies
  its ``service-ips`` element. Median of ``--rounds`` (5);
* RSS of the proxy process right after its first sync (VmRSS; nftproxy's short-lived ``nft``
  children for big transactions are not counted);
* CPU seconds the proxy process spent (user + system, plus that of the children it reaped:
  nftproxy's short-lived ``nft`` processes, kube-proxy's ``nft`` runs, plus those of its children
  still running: testkit.process.cpu_s):
  (a) from its start to the first sync committed, (b) from its start
  to the end of the new-Service rounds (the whole measurement at that size; its wall time is
  printed too). kube-proxy's API forwarder (testkit.lab.nsforward, a separate process) is not
  counted; the kube-apiserver's and etcd's CPU is counted for neither.

nftproxy's modules are byte-compiled first (as installed: pip and the image compile them), so a
start does not compile its source (the Kubernetes binaries are compiled too). Kernel events come
from a NETLINK_NETFILTER socket in the namespace (testkit.lab.nftwatch), not
``nft monitor``. Both proxies run with their default sync periods (min 1 s, periodic 30 s) and
the same node name; kube-proxy through testkit.k8s.kubeproxy (API via an in-namespace forwarder).
The namespaces are named ``<--netns-prefix>-<random>`` (default ``kpb``) and deleted after.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nftproxy
from bench.apiserver import NS, PROBE_BASE, cluster_ip, create_many, endpoint_slice, import_many, prepare, service
from bench.figures import figure
from bench.runners import METRICS, NODE, KubeProxyRunner, NftproxyRunner, Runner, kube_proxy_version
from nftproxy.operator import kube
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import wait_synced
from testkit.lab.netlab import bare_netns
from testkit.lab.nftwatch import ElementWatch, service_key
from testkit.process import cpu_s, rss_mb

NEW_BASE = PROBE_BASE + 500  # indexes of the Services created during the rounds (10.96.251.244 on)


@dataclass
class Measured:
    """One proxy at one size."""

    first: float  # start -> first sync committed, s
    lat: list[float]  # one new Service -> kernel, s, one per round
    rss: float  # MB right after the first sync
    cpu_first: float  # CPU s from start to the first sync committed
    cpu_all: float  # CPU s from start to the end of the rounds
    wall_all: float  # wall s from start to the end of the rounds
    api: list[float]  # the create call alone (the kube-apiserver's part of ``lat``), s, one per round

    def after_api(self) -> float:
        """Median of new Service -> kernel minus its create call: the proxy's part (the watch
        event leaves the apiserver about when the call returns)."""
        return statistics.median(t - a for t, a in zip(self.lat, self.api, strict=True))


def measure(
    api: Any,
    make: Callable[[str], Runner],
    last: int,
    rounds: int,
    new_index: Callable[[int], int],
    timeout: float,
    netns_prefix: str = "kpb",
) -> Measured:
    services, slices = f"/api/v1/namespaces/{NS}/services", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
    with bare_netns(netns_prefix) as netns:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        runner = make(netns)
        with ElementWatch(netns) as watch:
            key = service_key(cluster_ip(last), "tcp", 80)
            watch.expect("service-ips", key)
            t0 = time.perf_counter()
            runner.start()
            try:
                first = watch.wait("service-ips", key, timeout) - t0
                pid = runner.pid()
                cpu_first = cpu_s(pid)
                rss = rss_mb(pid)
                lat, api_s = [], []
                for r in range(rounds):
                    i = new_index(r)
                    since = time.time()
                    api.request("POST", slices, body=endpoint_slice(i, 10))
                    time.sleep(0.2)
                    wait_synced(netns, *METRICS, runner.prefix, since=since, timeout=timeout, quiet=0.2)
                    time.sleep(1.5)  # past the min sync period: the Service's sync is not held back
                    k = service_key(cluster_ip(i), "tcp", 80)
                    watch.expect("service-ips", k)
                    t1 = time.perf_counter()
                    api.request("POST", services, body=service(i))
                    api_s.append(time.perf_counter() - t1)
                    lat.append(watch.wait("service-ips", k, timeout) - t1)
                    runner.pid()  # still running
                cpu_all = cpu_s(runner.pid())
                wall_all = time.perf_counter() - t0
                if watch.overruns:
                    print(f"  (netlink receive buffer overran {watch.overruns}x)", flush=True)
            finally:
                runner.stop()
    return Measured(first, lat, rss, cpu_first, cpu_all, wall_all, api_s)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1000,5000,10000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--keep", action="store_true", help="keep the work directory (proxy logs)")
    p.add_argument("--via-api", action="store_true", help="create the bulk through the API (default: into etcd)")
    p.add_argument("--netns-prefix", default="kpb", help="name the network namespaces PREFIX-<random> (default kpb)")
    p.add_argument("--proxies", default="kube-proxy,nftproxy", help="which to run (the table needs both)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kp-bench-"))
    version = kube_proxy_version()
    # nftproxy as installed: byte-compiled, as pip installs it and as the image compiles it
    # (Dockerfile). From a source tree with PYTHONDONTWRITEBYTECODE set (some shells here), every
    # start compiled every module of nftproxy again (~0.1 s), which no installed proxy pays.
    compileall.compile_dir(Path(nftproxy.__file__).parent, quiet=1)
    print(f"kube-proxy {version} (nftables mode) vs nftproxy: Services x 10 endpoints, real kube-apiserver on loopback")
    results: dict[tuple[int, str], Measured] = {}
    try:
        with ControlPlane() as cp:
            prepare(cp, NODE)
            api = kube.connect(str(cp.kubeconfig))
            have = 0
            for si, n in enumerate(sizes):
                t0 = time.perf_counter()
                if args.via_api:
                    create_many(api, have, n, 10)
                else:
                    import_many(cp, have, n, 10)
                have = n
                print(f"  (created {n} Services + EndpointSlices in {time.perf_counter() - t0:.0f}s)", flush=True)
                for pi, (name, cls) in enumerate((("kube-proxy", KubeProxyRunner), ("nftproxy", NftproxyRunner))):
                    if name not in args.proxies.split(","):
                        continue
                    wd = work / f"{name}-{n}"
                    wd.mkdir()

                    def make(netns: str, cls: type[Runner] = cls, wd: Path = wd) -> Runner:
                        return cls(netns, cp, wd)  # type: ignore[call-arg]

                    def new_index(r: int, si: int = si, pi: int = pi) -> int:
                        return NEW_BASE + si * 100 + pi * 50 + r

                    m = measure(api, make, n - 1, args.rounds, new_index, args.timeout, args.netns_prefix)
                    results[n, name] = m
                    med, lo, hi = (x * 1000 for x in (statistics.median(m.lat), min(m.lat), max(m.lat)))
                    api_ms = statistics.median(m.api) * 1000
                    print(
                        f"{n:>6} {name:<10} first sync {m.first:8.2f} s   new Service median "
                        f"{med:9.1f} ms (min {lo:.1f}, max {hi:.1f}; of which the API call {api_ms:.1f})   "
                        f"RSS {m.rss:6.0f} MB   "
                        f"CPU {m.cpu_first:.2f} s to first sync, {m.cpu_all:.2f} s in all ({m.wall_all:.0f} s wall)",
                        flush=True,
                    )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if {p for _, p in results} != {"kube-proxy", "nftproxy"}:
        return 0
    print()
    print(f"kube-proxy {version} (nftables mode) vs nftproxy, Services x 10 endpoints; new Service: median of "
          f"{args.rounds}; CPU s: to the first sync / over the whole measurement at that size")  # fmt: skip
    print()
    print("| Services | first sync kube-proxy | first sync nftproxy | ratio | new Service → kernel kube-proxy | "
          "new Service → kernel nftproxy | ratio | of which after the API call returned, kube-proxy / nftproxy | "
          "RSS kube-proxy | RSS nftproxy | CPU s kube-proxy | CPU s nftproxy |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        kp, np_ = results[n, "kube-proxy"], results[n, "nftproxy"]
        kl, nl = statistics.median(kp.lat), statistics.median(np_.lat)
        for proxy, m, latency in (("kube-proxy", kp, kl), ("nftproxy", np_, nl)):
            figure("first sync", m.first, "s", services=n, proxy=proxy, kube_proxy=version)
            figure("new Service -> kernel (median)", latency, "s", services=n, proxy=proxy, kube_proxy=version)
            figure("new Service -> kernel after the API call (median)", m.after_api(), "s", services=n, proxy=proxy)
            figure("RSS", m.rss, "MB", services=n, proxy=proxy, kube_proxy=version)
            figure("CPU to first sync", m.cpu_first, "s", services=n, proxy=proxy, kube_proxy=version)
            figure("CPU whole measurement", m.cpu_all, "s", services=n, proxy=proxy, kube_proxy=version)
            figure("wall whole measurement", m.wall_all, "s", services=n, proxy=proxy, kube_proxy=version)
        print(
            f"| {n:,} | {kp.first:.2f} s | {np_.first:.2f} s | {kp.first / np_.first:.1f}x | {_ms(kl)} | "
            f"{_ms(nl)} | {kl / nl:.0f}x | {_ms(kp.after_api())} / {_ms(np_.after_api())} | "
            f"{kp.rss:.0f} MB | {np_.rss:.0f} MB | "
            f"{kp.cpu_first:.2f} / {kp.cpu_all:.2f} | {np_.cpu_first:.2f} / {np_.cpu_all:.2f} |"
        )
    return 0


def _ms(s: float) -> str:
    """A latency in ms below 10 s (one decimal below 100 ms), else in s."""
    if s < 0.1:
        return f"{s * 1000:.1f} ms"
    return f"{s * 1000:.0f} ms" if s < 10 else f"{s:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
