"""nftproxy against the real kube-proxy (v1.34, nftables mode), side by side in one run.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.vs_kubeproxy [--sizes 1000,5000,10000]``.

One kube-apiserver on loopback holds N Services x 10 endpoints (N = each size in turn, written
once into etcd and grown: bench.operator.import_many, the objects as the API stores them). For
each size, each proxy in turn gets a FRESH network namespace (nothing from the other) and is
measured:

* start -> first sync committed: from starting the process until the kernel notifies the
  ``service-ips`` element of the last Service (kube-proxy commits its first sync in one
  transaction; nftproxy's first load makes every Service reachable in its last commit);
* one Service created -> its rule in the kernel: its EndpointSlice is written first and synced,
  1.5 s later (past the 1 s min sync period) the Service is created; until the kernel notifies
  its ``service-ips`` element. Median of ``--rounds`` (5);
* RSS of the proxy process right after its first sync (VmRSS; nftproxy's short-lived ``nft``
  children for big transactions are not counted).

Kernel events come from a NETLINK_NETFILTER socket in the namespace (testkit.lab.nftwatch), not
``nft monitor``. Both proxies run with their default sync periods (min 1 s, periodic 30 s) and
the same node name; kube-proxy through testkit.k8s.kubeproxy (API via an in-namespace forwarder).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from bench.apiserver import CRD, NS, PROBE_BASE, cluster_ip, create_many, endpoint_slice, import_many, service
from bench.figures import figure
from bench.runners import METRICS, NODE, KubeProxyRunner, NftproxyRunner, Runner, rss_mb
from nftproxy.operator import kube
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import wait_synced
from testkit.lab.netlab import bare_netns
from testkit.lab.nftwatch import ElementWatch, service_key

NEW_BASE = PROBE_BASE + 500  # indexes of the Services created during the rounds (10.96.251.244 on)


def measure(
    api: Any,
    make: Callable[[str], Runner],
    last: int,
    rounds: int,
    new_index: Callable[[int], int],
    timeout: float,
) -> tuple[float, list[float], float]:
    import kubernetes  # noqa: PLC0415

    core = kubernetes.client.CoreV1Api(api)
    disc = kubernetes.client.DiscoveryV1Api(api)
    with bare_netns("kpb") as netns:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        runner = make(netns)
        with ElementWatch(netns) as watch:
            key = service_key(cluster_ip(last), "tcp", 80)
            watch.expect("service-ips", key)
            t0 = time.perf_counter()
            runner.start()
            try:
                first = watch.wait("service-ips", key, timeout) - t0
                rss = rss_mb(runner.pid())
                lat = []
                for r in range(rounds):
                    i = new_index(r)
                    since = time.time()
                    disc.create_namespaced_endpoint_slice(NS, cast(Any, endpoint_slice(i, 10)))
                    time.sleep(0.2)
                    wait_synced(netns, *METRICS, runner.prefix, since=since, timeout=timeout, quiet=0.2)
                    time.sleep(1.5)  # past the min sync period: the Service's sync is not held back
                    k = service_key(cluster_ip(i), "tcp", 80)
                    watch.expect("service-ips", k)
                    t1 = time.perf_counter()
                    core.create_namespaced_service(NS, cast(Any, service(i)))
                    lat.append(watch.wait("service-ips", k, timeout) - t1)
                    runner.pid()  # still running
                if watch.overruns:
                    print(f"  (netlink receive buffer overran {watch.overruns}x)", flush=True)
            finally:
                runner.stop()
    return first, lat, rss


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1000,5000,10000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--keep", action="store_true", help="keep the work directory (proxy logs)")
    p.add_argument("--via-api", action="store_true", help="create the bulk through the API (default: into etcd)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kp-bench-"))
    print("kube-proxy v1.34 (nftables mode) vs nftproxy: Services x 10 endpoints, real kube-apiserver on loopback")
    results: list[tuple[int, str, float, list[float], float]] = []
    try:
        with ControlPlane() as cp:
            cp.kubectl("apply", "-f", str(CRD))
            cp.kubectl("create", "namespace", NS)
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                    "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.1"}]}}  # fmt: skip
            cp.kubectl("apply", "-f", "-", input=json.dumps(node))
            api = kube.api_client(str(cp.kubeconfig))
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
                    wd = work / f"{name}-{n}"
                    wd.mkdir()

                    def make(netns: str, cls: type[Runner] = cls, wd: Path = wd) -> Runner:
                        return cls(netns, cp, wd)  # type: ignore[call-arg]

                    def new_index(r: int, si: int = si, pi: int = pi) -> int:
                        return NEW_BASE + si * 100 + pi * 50 + r

                    first, lat, rss = measure(api, make, n - 1, args.rounds, new_index, args.timeout)
                    results.append((n, name, first, lat, rss))
                    med, lo, hi = (x * 1000 for x in (statistics.median(lat), min(lat), max(lat)))
                    print(
                        f"{n:>6} {name:<10} first sync {first:8.2f} s   new Service median "
                        f"{med:9.1f} ms (min {lo:.1f}, max {hi:.1f})   RSS {rss:6.0f} MB",
                        flush=True,
                    )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("| Services | kube-proxy first sync | nftproxy first sync | ratio | kube-proxy new Service | "
          "nftproxy new Service | ratio | kube-proxy RSS | nftproxy RSS |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        kp = next(r for r in results if r[0] == n and r[1] == "kube-proxy")
        np_ = next(r for r in results if r[0] == n and r[1] == "nftproxy")
        kl, nl = statistics.median(kp[3]), statistics.median(np_[3])
        for proxy, r, latency in (("kube-proxy", kp, kl), ("nftproxy", np_, nl)):
            figure("first sync", r[2], "s", services=n, proxy=proxy)
            figure("new Service -> kernel (median)", latency, "s", services=n, proxy=proxy)
            figure("RSS", r[4], "MB", services=n, proxy=proxy)
        print(
            f"| {n:,} | {kp[2]:.2f} s | {np_[2]:.2f} s | {kp[2] / np_[2]:.1f}x | {kl * 1000:.0f} ms | "
            f"{nl * 1000:.1f} ms | {kl / nl:.0f}x | {kp[4]:.0f} MB | {np_[4]:.0f} MB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
