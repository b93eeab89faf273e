"""`make demo-quick`: a local cluster with nftproxy as its Service proxy, shown end to end (no kubelet).

A real etcd + kube-apiserver on loopback, a node (network namespace) with three "pods" running
real servers and an external client, `nftproxy run` for that node, example Services and
EndpointSlices applied with kubectl, then what an operator would look at and real requests.
Everything is removed at the end (KEEP=1: stays up until Ctrl-C). `make demo-down` removes
leftovers of a demo that was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".demo"
EXAMPLE = ROOT / "examples" / "demo.yaml"
START = time.monotonic()


def say(text: str) -> None:
    print(f"\n==> [{time.monotonic() - START:5.1f}s] {text}", flush=True)


def show(text: str, indent: str = "    ") -> None:
    print("\n".join(indent + line for line in text.rstrip().splitlines()), flush=True)


def down() -> int:
    removed = cleanup_stale()
    if WORK.exists():
        shutil.rmtree(WORK, ignore_errors=True)
    print(f"demo-down: removed {len(removed)} namespaces and {WORK}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m demo.quick",
        description="make demo-quick: a control plane, node namespaces and `nftproxy run`",
    )
    p.add_argument(
        "--down", action="store_true", help="remove what an earlier run left (processes, mounts, namespaces)"
    )
    if p.parse_args(argv).down:
        return down()
    cleanup_stale()
    WORK.mkdir(exist_ok=True)
    say("starting etcd + kube-apiserver on 127.0.0.1 (binaries from hack/k8s-tools.sh)")
    with ControlPlane() as cp, NetLab() as lab:
        print(f"    API server {cp.server}; kubeconfig {cp.kubeconfig}")
        cl = LocalCluster(cp, lab, WORK)
        try:
            return run(cl)
        finally:
            say("tearing down: operator, namespaces, control plane")
            cl.close()


def run(cl: LocalCluster) -> int:
    lab = cl.lab
    say("creating node-1 (a network namespace) with pods web-a, web-b, dns and an external client")
    node = cl.add_node("node-1", 1, zone="zone-a")
    pods = [lab.add_pod(node, name, tcp=(8080, 5353), udp=(5353,)) for name in ("web-a", "web-b", "dns")]
    ext = lab.add_client("ext", 100, via=node)
    for p in pods:
        print(f"    pod {p.name:<6} {p.ipv4:<12} {p.ipv6}")

    say(f"starting `nftproxy run --node-name node-1 --netns {node.netns}` (log: .demo/nftproxy-node-1.log)")
    cl.start_proxy(node, "--min-sync-period", "0.2s", "--status-period", "1s")

    say(f"kubectl apply -f {EXAMPLE.relative_to(ROOT)}")
    show(cl.cp.kubectl("apply", "-f", str(EXAMPLE)).stdout)

    def synced() -> dict[str, object] | None:
        st = cl.proxy_status(node).get("status", {})
        ok = any(c["type"] == "InSync" and c["status"] == "True" for c in st.get("conditions", []))
        return st if ok and st.get("services", 0) >= 3 else None

    eventually(synced, timeout=30, what="ProxyStatus in sync")
    say("kubectl get proxystatus")
    show(cl.cp.kubectl("get", "proxystatus", "-o", "wide").stdout)
    say("kubectl get services -A")
    show(cl.cp.kubectl("get", "services", "-A").stdout)

    say(f"nft list table ip nftproxy  (in {node.netns}: the Service maps)")
    listing = lab.exec(node, "nft", "list", "table", "ip", "nftproxy").stdout
    keep = False
    for line in listing.splitlines():
        if line.strip().startswith(
            ("map service-ips", "map service-nodeports", "map no-endpoint-services", "chain services")
        ):
            keep = True
        if keep:
            print(line)
            keep = line.strip() != "}"

    ok = probe_all(cl, node, pods, ext)

    say("scaling default/web down to web-a only (kubectl apply of its EndpointSlice)")
    web = json.loads(cl.cp.kubectl("get", "endpointslice", "web-abc12", "-o", "json").stdout)
    web["endpoints"] = [e for e in web["endpoints"] if e["addresses"][0] == pods[0].ipv4]
    t0 = time.monotonic()
    cl.apply(web)
    eventually(lambda: {r.pod for r in lab.probe(node, "tcp", "10.96.0.10", 80, count=10)} == {"web-a"}, what="scaled")
    print(f"    API write -> only web-a answers: {(time.monotonic() - t0) * 1000:.0f} ms (min-sync-period 0.2s)")

    code, body = cl.http_get(node, 10256, "/healthz")
    say(f"GET /healthz on node-1:10256 -> {code} {body.strip()}")
    _, metrics = cl.http_get(node, 10249, "/metrics")
    say("GET /metrics on node-1:10249 (excerpt)")
    show("\n".join(m for m in metrics.splitlines() if m.startswith(("kubeproxy_sync_proxy_rules_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_duration_seconds_sum", "nftproxy_services ", "nftproxy_endpoints "))))  # fmt: skip

    if os.environ.get("KEEP"):
        say("KEEP=1: the cluster stays up. Try:")
        show(f"export KUBECONFIG={cl.cp.kubeconfig}")
        show(f"ip netns exec {node.netns} nft list table ip nftproxy\n(Ctrl-C ends)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0 if ok else 1


def probe_all(cl: LocalCluster, node: Node, pods: list[Pod], ext: Client) -> bool:
    lab = cl.lab
    checks = [
        ("pod web-b", pods[1], "tcp", "10.96.0.10", 80, "ClusterIP default/web", "ok"),
        ("node-1", node, "tcp", "10.96.0.10", 80, "ClusterIP default/web", "ok"),
        ("external", ext, "tcp", "198.18.0.1", 30080, "NodePort default/web", "ok"),
        ("external", ext, "tcp", "fd00:198:18::1", 30080, "NodePort default/web (IPv6)", "ok"),
        ("pod web-a", pods[0], "udp", "10.96.0.53", 53, "ClusterIP kube-system/dns (UDP)", "ok"),
        ("pod web-a", pods[0], "tcp", "10.96.0.20", 80, "default/empty (no endpoints)", "refused"),
    ]
    say("real requests through the Services (10 each; who answered, and the source it saw)")
    ok = True
    for who, src, proto, host, port, what, want in checks:
        res = lab.probe(src, proto, host, port, count=10)
        seen = sorted({f"{r.pod} (saw {r.peer})" if r.ok else str(r.error) for r in res})
        good = all(r.ok for r in res) if want == "ok" else all(r.error == want for r in res)
        ok = ok and good
        flag = "" if good else "   <-- unexpected"
        print(f"    {who:<9} -> {proto} {host}:{port:<6} {what:<33} {', '.join(seen)}{flag}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
