"""`make demo`: what a cluster operator does with nftproxy, on a real cluster on this machine.

Builds the images (first run: visible progress, cached after), brings up the cluster
(testkit.realcluster: etcd, kube-apiserver, controller-manager, scheduler, two kubelet nodes with
containerd in network namespaces, an outside client), `helm install`s the chart with the local
image, shows `kubectl get proxystatus` and `nft list table ip nftproxy` on a node, deploys an echo
Deployment behind a NodePort Service, scales it and rolls it under continuous requests, then
rolls nftproxy itself. Every step prints its duration. Everything is removed at the end
(KEEP=1: the cluster stays up, `make demo-down` removes it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from testkit.realcluster import addons as dns
from testkit.realcluster import workload as w
from testkit.realcluster.cluster import ClusterError, RealCluster, state_dir

NAME = "demo"
T = TypeVar("T")
START = time.monotonic()


def say(text: str) -> None:
    print(f"\n==> [{time.monotonic() - START:6.1f}s] {text}", flush=True)


def show(text: str, indent: str = "    ", limit: int = 0) -> None:
    lines = text.rstrip().splitlines()
    if limit and len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    print("\n".join(indent + line for line in lines), flush=True)


def timed(text: str, fn: Callable[..., T], *args: object) -> T:
    say(text)
    t0 = time.monotonic()
    result = fn(*args)
    print(f"    done in {time.monotonic() - t0:.1f}s", flush=True)
    return result


def down() -> int:
    if not (state_dir(NAME) / "state.json").exists():
        print("demo-down: no demo cluster")
        return 0
    RealCluster.attach(NAME).down()
    print("demo-down: the demo cluster is removed (processes, mounts, cgroups, namespaces)")
    return 0


def requests(c: RealCluster, host: str, port: int, n: int) -> str:
    """N requests from the outside client: which pods answered."""
    counts = Counter(w.fetch_from(c.client_argv([]), host, port)["pod"] for _ in range(n))
    return ", ".join(f"{pod}: {k}" for pod, k in sorted(counts.items()))


def traffic_line(results: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{name}: {r['ok']} answered, {r['failed']} failed" for name, r in results.items())


def run(c: RealCluster) -> None:
    say("kubectl get nodes -o wide")
    show(c.kubectl("get", "nodes", "-o", "wide"))

    timed(
        f"helm install nftproxy charts/nftproxy -n kube-system --set image.repository=localhost/nftproxy "
        f"--set image.tag={c.images['nftproxy'].rsplit(':', 1)[1]} --set apiServer.host=127.0.0.1 ... --wait",
        w.helm_install,
        c,
    )
    say("kubectl get pods -n kube-system -o wide")
    show(c.kubectl("get", "pods", "-n", "kube-system", "-o", "wide"))
    say("kubectl get proxystatus")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(w.condition(s, "InSync") for s in w.proxy_statuses(c).values()):
        time.sleep(0.5)
    show(c.kubectl("get", "proxystatus"))

    timed(
        "kubectl apply: CoreDNS (built here), 2 replicas behind kube-system/kube-dns 10.96.0.10; its API "
        "client goes through the `kubernetes` Service, that is through nftproxy",
        dns.install_coredns,
        c,
    )
    show(c.kubectl("get", "pods,services,endpointslices", "-n", "kube-system", "-l", "k8s-app=kube-dns", "-o", "wide"))
    show(c.kubectl("get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"))

    timed(
        "kubectl apply: Deployment web (echo servers on node-1), Services web (NodePort 30080) and "
        "web-local (externalTrafficPolicy: Local, 30081), a client pod on node-2",
        lambda: (
            c.kubectl("apply", "-f", "-", input=w.web_manifests()),
            c.kubectl("rollout", "status", "deployment/web", "--timeout=120s"),
            c.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=120s"),
        ),
    )
    show(c.kubectl("get", "pods,services,endpointslices", "-n", "default", "-o", "wide"))
    say("on node-1: nft list table ip nftproxy")
    show(w.nft_table(c, "node-1"), limit=60)

    ip = w.cluster_ip(c, "web")
    say(f"requests: the client pod (node-2) -> ClusterIP {ip}:80")
    show(json.dumps(w.pod_get(c, "client", f"http://{ip}/")))
    timed(
        "a pod on node-1 with python3 (nftproxy's image) and in-cluster config",
        lambda: (
            c.kubectl("apply", "-f", "-", input=dns.client_pod_manifest("api-client", "node-1", c.images["nftproxy"])),
            c.kubectl("wait", "--for=condition=Ready", "pod/api-client", "--timeout=120s"),
        ),
    )
    say("it resolves web.default.svc.cluster.local through kube-dns 10.96.0.10 (CoreDNS, via nftproxy)")
    show(json.dumps(dns.dns_query(c, "api-client", "web.default.svc.cluster.local")))
    say(
        "it reaches https://kubernetes.default.svc/version: the name from CoreDNS, then 10.96.0.1:443 "
        "through nftproxy to the apiserver (TLS checked with the ServiceAccount's CA)"
    )
    version = dns.api_get(c, "api-client", "/version")
    show(json.dumps({k: version[k] for k in ("gitVersion", "platform")}))
    say("requests: the outside client (172.30.0.100) -> NodePort 30080 on node-2 (the pods are on node-1)")
    show(requests(c, "172.30.0.12", w.WEB_NODEPORT, 20))

    timed("kubectl scale deployment web --replicas=4", lambda: (
        c.kubectl("scale", "deployment", "web", "--replicas=4"),
        c.kubectl("rollout", "status", "deployment/web", "--timeout=120s"),
    ))  # fmt: skip
    time.sleep(2)
    show(requests(c, "172.30.0.12", w.WEB_NODEPORT, 40))

    def roll() -> None:
        patch = {"spec": {"template": {"metadata": {"annotations": {"roll": "2"}}}}}
        c.kubectl("patch", "deployment", "web", "--type=merge", "-p", json.dumps(patch))
        c.kubectl("rollout", "status", "deployment/web", "--timeout=180s")

    results = timed(
        "rolling update of web under continuous new connections (outside client -> NodePorts, node-2 and "
        "the client pod -> ClusterIP)",
        w.with_traffic,
        c,
        roll,
    )
    show(traffic_line(results))
    results = timed(
        "rolling update of nftproxy itself (helm upgrade, one node at a time) under the same traffic",
        w.with_traffic,
        c,
        lambda: w.helm_upgrade(c, {"podAnnotations.rollout": "2"}),
    )
    show(traffic_line(results))
    say("kubectl get proxystatus")
    show(c.kubectl("get", "proxystatus"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m demo.realcluster",
        description="make demo: a real cluster on this machine, nftproxy installed with helm (KEEP=1 keeps it up)",
    )
    p.add_argument(
        "--down", action="store_true", help="remove what an earlier run left (processes, mounts, namespaces)"
    )
    if p.parse_args(argv).down:
        return down()
    if (state_dir(NAME) / "state.json").exists():
        say("a demo cluster from an earlier run is still there: removing it")
        RealCluster.attach(NAME).down()
    c = RealCluster(NAME, owner=False)
    say("cluster up: images (built once, cached), control plane, two kubelet nodes, an outside client")
    try:
        c.up()
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"    up in {c.timings['up']:.1f}s")
    try:
        run(c)
    except (ClusterError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        if os.environ.get("KEEP") != "1":
            c.down()
        return 1
    if os.environ.get("KEEP") == "1":
        say("KEEP=1: the cluster stays up")
        print(f"    export KUBECONFIG={c.kubeconfig}")
        print(f"    node-1: {' '.join(c.node_argv('node-1', ['nft', 'list', 'table', 'ip', 'nftproxy']))}")
        print("    make demo-down   # removes it")
        return 0
    timed("make demo-down: every process, mount, cgroup and namespace removed", c.down)
    say(f"demo finished in {time.monotonic() - START:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
