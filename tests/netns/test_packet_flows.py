"""Services proven with real packets: `nftproxy apply` programs real node namespaces, real
clients connect, and the backend pod reports who answered and which source address it saw.

Topology (testkit.lab.netlab): node1 runs pods a, b, t1, t2; node2 runs pod c; an external
client sits on the node network. Both nodes run `nftproxy apply` with the same objects.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, ProbeResult, cleanup_stale
from tests.support.policy_lab import flow_flags, flow_objects
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

HTTP = [k.port(8080, "http")]


@dataclass
class Cluster:
    lab: NetLab
    node1: Node
    node2: Node
    a: Pod
    b: Pod
    c: Pod
    t1: Pod
    t2: Pod
    ext: Client
    manifest: Path

    def host(self, name: str) -> Node | Pod | Client:
        hosts: dict[str, Node | Pod | Client] = {
            "node1": self.node1,
            "node2": self.node2,
            "ext": self.ext,
            "a": self.a,
            "b": self.b,
            "c": self.c,
        }
        return hosts[name]

    def apply(self, node: Node, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.lab.exec(
            node, *nftproxy_cmd("apply", "-f", str(self.manifest), *node_flags(node), *extra), check=False
        )


def nftproxy_cmd(*args: str) -> list[str]:
    return nftproxy_argv(*args)


def node_flags(node: Node) -> list[str]:
    return flow_flags(node)


def objects(a: Pod, b: Pod, c: Pod, t1: Pod, t2: Pod) -> list[k.Obj]:
    """The objects of this lab (tests/support/policy_lab.py: the tracer's unit tests use the same)."""
    return flow_objects(a, b, c, t1, t2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cleanup_stale()
    with NetLab() as lab:
        node1, node2 = lab.add_node("node1", 1), lab.add_node("node2", 2)
        a, b, t1, t2 = (lab.add_pod(node1, n, tcp=(8080,), udp=(5353,)) for n in ("a", "b", "t1", "t2"))
        c = lab.add_pod(node2, "c", tcp=(8080,), udp=(5353,))
        ext = lab.add_client("ext", 100, via=node1)
        manifest = k.write(tmp_path_factory.mktemp("flows") / "cluster.yaml", objects(a, b, c, t1, t2))
        cl = Cluster(lab, node1, node2, a, b, c, t1, t2, ext, manifest)
        for node in (node1, node2):
            r = cl.apply(node)
            assert r.returncode == 0, r.stderr
        yield cl


# source, proto, destination, port -> backends | "refused" | "timeout", source seen by the backend
FLOWS = [
    # ClusterIP from a pod on another node: DNAT on node2, routed to node1, source preserved
    ("c", "tcp", "10.96.0.10", 80, {"a", "b"}, "preserved"),
    # ClusterIP from the node itself: source outside the cluster CIDR -> masqueraded
    ("node1", "tcp", "10.96.0.10", 80, {"a", "b"}, "masqueraded"),
    # NodePort, LoadBalancer IP and externalIP from outside: masqueraded (eTP Cluster)
    ("ext", "tcp", "198.18.0.1", 30080, {"a", "b"}, "masqueraded"),
    ("ext", "tcp", "198.19.0.10", 80, {"a", "b"}, "masqueraded"),
    ("ext", "tcp", "198.19.0.20", 80, {"a", "b"}, "masqueraded"),
    # UDP ClusterIP to a named port on the other node, source preserved
    ("a", "udp", "10.96.0.53", 53, {"c"}, "preserved"),
    # no endpoints: rejected, never blackholed, never falling through to the node
    ("a", "tcp", "10.96.0.20", 80, "refused", None),
    ("node1", "tcp", "10.96.0.20", 80, "refused", None),
    ("ext", "tcp", "198.18.0.1", 30090, "refused", None),
    # a ClusterIP on a port no Service serves: rejected
    ("a", "tcp", "10.96.0.10", 81, "refused", None),
    # terminating fallback: only the serving one; a ready endpoint beats a terminating one
    ("a", "tcp", "10.96.0.30", 80, {"t1"}, "preserved"),
    ("a", "tcp", "10.96.0.31", 80, {"t2"}, "preserved"),
    # IPv6: ClusterIP from a remote pod, NodePort and LoadBalancer IP from outside
    ("c", "tcp", "fd00:10:96::10", 80, {"a", "b"}, "preserved"),
    ("ext", "tcp", "fd00:198:18::1", 30080, {"a", "b"}, "masqueraded"),
    ("ext", "tcp", "fd00:198:19::10", 80, {"a", "b"}, "masqueraded"),
    # a Service labelled for another proxy is not programmed: routed on, nobody answers
    ("a", "tcp", "10.96.0.40", 80, "timeout", None),
]


def _own_address(host: Node | Pod | Client, dest: str) -> str:
    return host.ipv6 if ":" in dest else host.ipv4


@pytest.mark.parametrize(("source", "proto", "dest", "port", "expect", "masq"), FLOWS)
def test_flow(
    cluster: Cluster, source: str, proto: str, dest: str, port: int, expect: object, masq: str | None
) -> None:
    src = cluster.host(source)
    results = cluster.lab.probe(src, proto, dest, port, count=6 if expect != "timeout" else 2, timeout=1.0)
    if isinstance(expect, str):
        assert [r.error for r in results] == [expect] * len(results), results
        return
    assert all(r.ok for r in results), results
    assert {r.pod for r in results} <= expect, results  # type: ignore[operator]
    mine = _own_address(src, dest)
    for r in results:
        if masq == "preserved":
            assert r.peer == mine, f"{r.pod} saw {r.peer}, expected the client's own {mine}"
        else:
            assert r.peer != mine, f"{r.pod} saw the client's own address {mine}: not masqueraded"


def test_load_spreads_over_all_endpoints(cluster: Cluster) -> None:
    results = cluster.lab.probe(cluster.c, "tcp", "10.96.0.10", 80, count=200, timeout=1.0)
    seen = Counter(r.pod for r in results)
    assert set(seen) == {"a", "b"}, seen
    assert min(seen.values()) >= 60, f"uneven spread over 2 endpoints: {seen}"


def test_hairpin_is_masqueraded_other_pod_traffic_is_not(cluster: Cluster) -> None:
    results = cluster.lab.probe(cluster.a, "tcp", "10.96.0.10", 80, count=40, timeout=1.0)
    assert all(r.ok for r in results), results
    by_pod: dict[str | None, set[str | None]] = {}
    for r in results:
        by_pod.setdefault(r.pod, set()).add(r.peer)
    assert set(by_pod) == {"a", "b"}, by_pod
    # a reached itself: the source must be rewritten, or a's reply would skip the NAT
    assert by_pod["a"] == {cluster.node1.gateway4}, by_pod
    # a reached b: pod-to-pod keeps the pod's own address
    assert by_pod["b"] == {cluster.a.ipv4}, by_pod


def _probe_one(cluster: Cluster, src: Node | Pod | Client, dest: str, port: int) -> ProbeResult:
    return cluster.lab.probe(src, "tcp", dest, port, count=1, timeout=1.0)[0]


def test_masquerade_all(cluster: Cluster) -> None:
    try:
        r = cluster.apply(cluster.node2, "--masquerade-all")
        assert r.returncode == 0, r.stderr
        res = cluster.lab.probe(cluster.c, "tcp", "10.96.0.10", 80, count=5)
        assert all(x.ok and x.peer != cluster.c.ipv4 for x in res), res
    finally:
        assert cluster.apply(cluster.node2).returncode == 0
    assert _probe_one(cluster, cluster.c, "10.96.0.10", 80).peer == cluster.c.ipv4


def test_masquerade_bit_moves_the_mark_and_masquerading_still_works(cluster: Cluster) -> None:
    """--masquerade-bit (kube-proxy's masqueradeBit): the mark that asks for SNAT is that bit's."""
    try:
        r = cluster.apply(cluster.node2, "--masquerade-all", "--masquerade-bit", "3")
        assert r.returncode == 0, r.stderr
        table = cluster.lab.exec(cluster.node2, "nft", "list", "chain", "ip", "nftproxy", "masquerading").stdout
        assert "meta mark & 0x00000008 == 0x00000000 return" in table and "0x00004000" not in table
        res = cluster.lab.probe(cluster.c, "tcp", "10.96.0.10", 80, count=5)
        assert all(x.ok and x.peer != cluster.c.ipv4 for x in res), res
        r = cluster.apply(cluster.node2, "--masquerade-bit", "3")  # without --masquerade-all: the client's own IP
        assert r.returncode == 0, r.stderr
        assert _probe_one(cluster, cluster.c, "10.96.0.10", 80).peer == cluster.c.ipv4
    finally:
        assert cluster.apply(cluster.node2).returncode == 0


def test_nodeport_addresses_limit_where_nodeports_answer(cluster: Cluster) -> None:
    node = cluster.node1
    try:
        # Only the IPv6 node network and an IPv4 range the node is not in: on IPv4 the node's own
        # stack answers (nothing listens).
        r = cluster.apply(node, "--nodeport-addresses", "198.19.99.0/24,fd00:198:18::/64")
        assert r.returncode == 0, r.stderr
        assert _probe_one(cluster, cluster.ext, node.ipv4, 30080) == ProbeResult(error="refused")
        assert _probe_one(cluster, cluster.ext, node.ipv6, 30080).pod in {"a", "b"}
        # A family without a CIDR answers on all its addresses (kube-proxy's NodePortAddresses);
        # the keywords: primary is the node's IPs.
        r = cluster.apply(node, "--nodeport-addresses", "fd00:198:18::/64")
        assert r.returncode == 0, r.stderr
        assert _probe_one(cluster, cluster.ext, node.ipv4, 30080).pod in {"a", "b"}
        r = cluster.apply(node, "--nodeport-addresses", "primary")
        assert r.returncode == 0, r.stderr
        assert _probe_one(cluster, cluster.ext, node.ipv4, 30080).pod in {"a", "b"}
        assert _probe_one(cluster, cluster.ext, node.ipv6, 30080).pod in {"a", "b"}
    finally:
        assert cluster.apply(node).returncode == 0
    assert _probe_one(cluster, cluster.ext, node.ipv4, 30080).pod in {"a", "b"}
