"""A transaction the kernel keeps refusing: the previous table keeps serving, ProxyStatus says why,
the proxy retries with backoff, and converges once the kernel accepts again.

The refusal is real (the kernel's EBUSY), injected from outside: a rule appended to our `services`
chain (matching only 192.0.2.255, an address no packet here has) references `cluster-2`. When the
Service scales from 2 endpoints to 3, `cluster-2` is no longer needed and deleting it is refused,
by the incremental sync and by every full sync after it (an adopted chain is trusted by name, so
the full sync does not rewrite `services`), until the test removes the reference.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest

from nftproxy.cli.verify import verify_once
from nftproxy.compiler import ProxyConfig
from nftproxy.diagnose.verify import Report
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator import kube
from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, Node

pytestmark = [pytest.mark.resilience, pytest.mark.k8s, pytest.mark.netns]


@pytest.fixture
def cluster(own_control_plane: ControlPlane, tmp_path: Path) -> Iterator[LocalCluster]:
    with NetLab("vf") as lab:
        cl = LocalCluster(own_control_plane, lab, tmp_path)
        try:
            yield cl
        finally:
            cl.close()


def nft(netns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args], capture_output=True, text=True, check=True
    ).stdout


def status(cl: LocalCluster, node: Node) -> dict[str, Any]:
    return dict(cl.proxy_status(node).get("status", {}))


def test_refused_transaction_keeps_serving_is_reported_and_retried(cluster: LocalCluster) -> None:
    cl = cluster
    node = cl.add_node("refuse-node", 1)
    pods = [cl.lab.add_pod(node, f"p{i}", tcp=(8080,), udp=()) for i in range(3)]
    ns = cl.namespace("refuse")
    web = k.service("web", ["10.96.7.10"], [k.port(80, "http")], namespace=ns)

    def web_slice(n: int) -> k.Obj:
        eps = [k.endpoint(p.ipv4, node=node.name) for p in pods[:n]]
        return k.endpoint_slice("web-1", "web", eps, [k.port(8080, "http")], namespace=ns)

    cl.apply(web, web_slice(2))
    cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s")

    def answers(count: int = 6) -> set[str]:
        return {r.pod or str(r.error) for r in cl.lab.probe(node, "tcp", "10.96.7.10", 80, count=count)}

    eventually(lambda: answers() == {"p0", "p1"}, timeout=30, what="web on p0, p1")

    # The injected reference: a rule no packet matches (TEST-NET-1 broadcast), holding cluster-2.
    nft(node.netns, "add", "rule", "ip", "nftproxy", "services", "ip", "daddr", "192.0.2.255", "jump", "cluster-2")
    cl.apply(web_slice(3))  # cluster-2 is no longer needed: deleting it is refused (EBUSY)

    def refused() -> dict[str, Any] | None:
        st = status(cl, node)
        cond = {c["type"]: c for c in st.get("conditions", [])}.get("InSync", {})
        failing = int(st.get("failures") or 0) >= 3 and "busy" in str(st.get("lastError", "")).lower()
        return st if failing and cond.get("status") == "False" and cond.get("reason") == "SyncFailed" else None

    st = eventually(refused, timeout=60, what="ProxyStatus reporting the refused sync")
    assert "Device or resource busy" in str(st["lastError"]), st
    # The previous table keeps serving: still p0 and p1, never p2, nothing refused or lost.
    assert answers(12) == {"p0", "p1"}

    # Retried with backoff: the waits between attempts grow.
    waits = [float(w) for w in re.findall(r"sync failed, retrying in ([\d.]+)s", cl.proxy_log(node))]
    assert len(waits) >= 3 and waits[2] > waits[0], waits

    # The kernel accepts again: the next retry converges, the checker finds nothing.
    handle = next(
        line.rsplit("# handle ", 1)[1]
        for line in nft(node.netns, "-a", "list", "chain", "ip", "nftproxy", "services").splitlines()
        if "jump cluster-2" in line
    )
    nft(node.netns, "delete", "rule", "ip", "nftproxy", "services", "handle", handle.strip())
    eventually(lambda: answers(20) == {"p0", "p1", "p2"}, timeout=60, what="web on p0, p1, p2 after the retry")
    api = kube.connect(str(cl.cp.kubeconfig))
    config = ProxyConfig(
        node_name=node.name, cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48"))
    )
    backend = KernelBackend(node.netns)
    try:

        def in_sync() -> Report | None:
            r = verify_once(api, backend, config)
            return None if r.differences else r

        assert eventually(in_sync, timeout=30, what="checker: no difference").services >= 1
    finally:
        backend.close()

    def recovered() -> dict[str, Any] | None:
        s = status(cl, node)
        return None if s.get("lastError") else s

    eventually(recovered, timeout=30, what="ProxyStatus without error")
