"""Real-cluster benchmark (testkit.realcluster): time to a working nftproxy, memory, rollouts.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.realcluster [--warm 3] [--cold]``
(``make bench-cluster``).

* up -> both nftproxy pods Ready: from ``RealCluster.up()`` (images checked or built, control
  plane, two kubelet nodes, images imported) through ``helm install --wait`` until both pods are
  Ready and both ProxyStatuses InSync. Warm: images built and already in the nodes' persistent
  containerd stores (median of --warm runs). Cold (--cold): images built from nothing in a
  temporary NFTPROXY_IMAGES (mmdebstrap, pip: network downloads) and imported into fresh
  containerd roots, one run; the Kubernetes binaries stay cached either way.
* memory of the whole cluster: RSS of every process in the cluster's cgroup (etcd, apiserver,
  controller-manager, scheduler, forwarder, per node containerd + kubelet + shims + pods) with
  nftproxy and a 2-replica echo Deployment + client pod running, by component.
* failed requests of the two rolling updates (the echo Deployment, then the nftproxy DaemonSet)
  under continuous new connections from the outside client, a node and a pod.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from testkit import process
from testkit.realcluster import RealCluster, procs
from testkit.realcluster import workload as w


def until_pods_ready(c: RealCluster, timeout: float = 180.0) -> None:
    w.helm_install(c)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = w.nftproxy_pods(c)
        st = w.proxy_statuses(c)
        if (
            len(pods) == 2
            and all(map(w.pod_ready, pods.values()))
            and len(st) == 2
            and all(w.condition(s, "InSync") for s in st.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError("nftproxy pods not Ready in time")


def rss_by_component(c: RealCluster) -> dict[str, float]:
    """MiB of RSS per process name, every process of the cluster's cgroup."""
    out: dict[str, float] = defaultdict(float)
    for pid in procs.cgroup_pids(c.cgroup):
        name, rss = process.name(pid), process.rss_mb(pid)
        if not name or math.isnan(rss):  # gone meanwhile
            continue
        if name.startswith("python"):  # the nftproxy pods, or the apiserver forwarder
            args = " ".join(process.cmdline(pid))
            name = "forwarder (python)" if "realcluster.forward" in args else "nftproxy pods (python)"
        out[name] += rss
    return dict(out)


def one_run(name: str, *, workload: bool, cold: bool = False) -> dict[str, Any]:
    c = RealCluster(name, log=lambda s: None, image_store=not cold)
    t0 = time.monotonic()
    try:
        c.up()
        t_up = time.monotonic() - t0
        until_pods_ready(c)
        result: dict[str, Any] = {"up": t_up, "ready": time.monotonic() - t0, "steps": dict(c.timings)}
        if workload:
            c.kubectl("apply", "-f", "-", input=w.web_manifests())
            c.kubectl("rollout", "status", "deployment/web", "--timeout=120s")
            c.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=120s")
            time.sleep(5)
            result["rss"] = rss_by_component(c)

            def roll() -> None:
                patch = {"spec": {"template": {"metadata": {"annotations": {"roll": "2"}}}}}
                c.kubectl("patch", "deployment", "web", "--type=merge", "-p", json.dumps(patch))
                c.kubectl("rollout", "status", "deployment/web", "--timeout=180s")

            result["roll_web"] = w.with_traffic(c, roll)
            result["roll_nftproxy"] = w.with_traffic(c, lambda: w.helm_upgrade(c, {"podAnnotations.rollout": "2"}))
        t_down = time.monotonic()
    finally:
        c.down()
    result["down"] = time.monotonic() - t_down
    return result


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.realcluster")
    p.add_argument("--warm", type=int, default=3, help="runs with the images cached")
    p.add_argument("--cold", action="store_true", help="also one run building the images from nothing")
    args = p.parse_args()
    print(f"# machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start (other work may run)")
    runs: list[dict[str, Any]] = []
    cold: dict[str, Any] | None = None
    if args.cold:
        tmp = Path(tempfile.mkdtemp(prefix="nftproxy-rc-bench-images-", dir="/var/tmp"))
        os.environ["NFTPROXY_IMAGES"] = str(tmp)
        try:
            cold = one_run(f"bench{os.getpid()}c", workload=False, cold=True)
        finally:
            del os.environ["NFTPROXY_IMAGES"]
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"cold: up {cold['up']:.1f}s, both nftproxy pods Ready {cold['ready']:.1f}s; steps {_steps(cold)}")
    for i in range(args.warm):
        r = one_run(f"bench{os.getpid()}w{i}", workload=i == 0)
        runs.append(r)
        print(f"warm {i + 1}: up {r['up']:.1f}s, both nftproxy pods Ready {r['ready']:.1f}s, down {r['down']:.1f}s; "
              f"steps {_steps(r)}")  # fmt: skip
    if runs:
        ready = statistics.median(r["ready"] for r in runs)
        print(f"\nup -> both nftproxy pods Ready, warm (median of {len(runs)}): {ready:.1f}s")
        if cold:
            print(f"up -> both nftproxy pods Ready, cold: {cold['ready']:.1f}s ({cold['ready'] / ready:.1f}x warm)")
        first = runs[0]
        rss = first["rss"]
        print(
            f"memory of the whole cluster (RSS, 2 nodes, nftproxy + 2 echo pods + client): {sum(rss.values()):.0f} MiB"
        )
        for name, mib in sorted(rss.items(), key=lambda kv: -kv[1]):
            print(f"    {name:24s} {mib:7.1f} MiB")
        for what in ("roll_web", "roll_nftproxy"):
            line = "; ".join(f"{k}: {v['failed']} failed of {v['ok'] + v['failed']}" for k, v in first[what].items())
            print(f"{what}: {line}")
    print(f"# load {os.getloadavg()[0]:.2f} at the end")
    return 0


def _steps(r: dict[str, Any]) -> str:
    return ", ".join(f"{k.split(' (')[0]} {v:.1f}s" for k, v in r["steps"].items() if k != "up")


if __name__ == "__main__":
    raise SystemExit(main())
