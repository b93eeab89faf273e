"""`nftproxy verify` end to end: a real apiserver, `nftproxy run --netns`, then the command."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, Node
from tests.support.run import run_nftproxy

pytestmark = [pytest.mark.k8s, pytest.mark.netns]
CIDRS = ("--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48")


@pytest.fixture
def cluster(control_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[LocalCluster, Node]]:
    with NetLab("vf") as lab:
        cl = LocalCluster(control_plane, lab, tmp_path)
        try:
            node = cl.add_node("verify-node", 1)
            yield cl, node
        finally:
            cl.close()


def verify(cl: LocalCluster, node: Node, *flags: str) -> subprocess.CompletedProcess[str]:
    argv = ["verify", "--node-name", node.name, "--netns", node.netns, "--kubeconfig", str(cl.cp.kubeconfig), *flags]
    return run_nftproxy(*argv, timeout=120)


def nft(node: Node, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", node.netns, "nft", *args], check=True, capture_output=True)


def test_verify_exit_codes_and_differences_in_words(cluster: tuple[LocalCluster, Node]) -> None:
    cl, node = cluster
    ns = cl.namespace("verify")
    eps = [k.endpoint(f"10.244.1.{i}", node=node.name) for i in (2, 3)]
    cl.apply(
        k.service("web", ["10.96.8.10"], [k.port(80, "http")], namespace=ns),
        k.endpoint_slice("web-1", "web", eps, [k.port(8080, "http")], namespace=ns),
        k.service("db", ["10.96.8.11"], [k.port(5432, "pg")], namespace=ns),
        k.endpoint_slice("db-1", "db", [k.endpoint("10.244.2.2", node="other")], [k.port(5432, "pg")], namespace=ns),
    )
    r = verify(cl, node, *CIDRS)
    assert r.returncode == 1 and "table ip nftproxy missing from the kernel" in r.stdout, r

    cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "1s")

    def in_sync() -> subprocess.CompletedProcess[str] | None:
        x = verify(cl, node, *CIDRS)
        return x if x.returncode == 0 else None

    r = eventually(in_sync, timeout=60, what="in sync")
    assert "nftproxy verify: in sync:" in r.stdout, r

    # Stop the proxy, then change the kernel behind its back and the API without it.
    cl.stop_proxy(node)
    nft(node, "delete", "element", "ip", "nftproxy", "service-ips", "{ 10.96.8.10 . tcp . 80 }")
    cl.apply(k.service("db", ["10.96.8.11"], [k.port(5432, "pg")], namespace=ns, internalTrafficPolicy="Local"))
    r = verify(cl, node, *CIDRS)
    assert r.returncode == 1, r
    lines = r.stdout.splitlines()
    assert any(
        x.startswith("Service verify/web:http missing: 10.96.8.10 tcp 80 is not in the kernel") for x in lines
    ), r
    assert any(x.startswith("Service verify/db:pg stale policy on 10.96.8.11 tcp 5432") for x in lines), r
    # Flags other than the proxy's show as a difference too, never silently.
    r = verify(cl, node, "--cluster-cidr", "10.0.0.0/8")
    assert r.returncode == 1 and "cluster CIDRs (--cluster-cidr) differ" in r.stdout, r
    # Unusable input: exit 2, one line.
    r = verify(cl, node, "--kubeconfig", "/nonexistent/kubeconfig")
    assert r.returncode == 2 and r.stderr.startswith("nftproxy verify: cannot use the kubeconfig"), r
    r = run_nftproxy("verify", "--node-name", "x", "--netns", "vf-no-such-netns", timeout=60)
    assert r.returncode == 2 and "no network namespace" in r.stderr, r
    # A restarted proxy repairs both: in sync again.
    cl.start_proxy(node, "--min-sync-period", "0")
    eventually(in_sync, timeout=60, what="repaired after restart")
