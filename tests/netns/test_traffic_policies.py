"""Traffic policies, topology and source ranges with real packets across two nodes.

node1 (zone-a) runs pods a1, a2; node2 (zone-b) runs pods b1, b2. Both nodes `nftproxy apply`
the same objects (each with its own --node-name). Clients ext (198.18.0.100) and ext2
(198.18.0.101) sit on the node network; LoadBalancer IPs are routed to node1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.policy_lab import policy_objects
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns


@dataclass
class Two:
    lab: NetLab
    node1: Node
    node2: Node
    a1: Pod
    a2: Pod
    b1: Pod
    b2: Pod
    ext: Client
    ext2: Client

    def pods(self, src: Node | Pod | Client, dest: str, port: int, count: int = 20) -> set[str]:
        return {r.pod or str(r.error) for r in self.lab.probe(src, "tcp", dest, port, count=count, timeout=0.7)}

    def peers(self, src: Node | Pod | Client, dest: str, port: int, count: int = 10) -> set[str | None]:
        return {r.peer for r in self.lab.probe(src, "tcp", dest, port, count=count, timeout=0.7)}


def objects(t: Two) -> list[k.Obj]:
    """The objects of this lab (tests/support/policy_lab.py: the tracer's unit tests use the same)."""
    return policy_objects(t.node1, t.node2, t.a1, t.a2, t.b1, t.b2)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Two]:
    cleanup_stale()
    with NetLab() as lab:
        n1, n2 = lab.add_node("node1", 1), lab.add_node("node2", 2)
        a1, a2 = (lab.add_pod(n1, n, tcp=(8080,), udp=()) for n in ("a1", "a2"))
        b1, b2 = (lab.add_pod(n2, n, tcp=(8080,), udp=()) for n in ("b1", "b2"))
        t = Two(lab, n1, n2, a1, a2, b1, b2, lab.add_client("ext", 100, via=n1), lab.add_client("ext2", 101, via=n1))
        manifest = k.write(tmp_path_factory.mktemp("policies") / "objects.yaml", objects(t))
        for node in (n1, n2):
            r = lab.exec(
                node,
                *nftproxy_argv(), "apply", "-f", str(manifest), "--node-name", node.name,
                "--cluster-cidr", "10.244.0.0/16",
                check=False,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
        yield t


def test_etp_local_external_traffic_goes_to_local_endpoints_with_client_source(two: Two) -> None:
    assert two.pods(two.ext, "198.19.3.10", 80) == {"a1"}  # LB IP routed to node1: its one local endpoint
    assert two.peers(two.ext, "198.19.3.10", 80) == {two.ext.ipv4}  # client source kept
    assert two.pods(two.ext, two.node1.ipv4, 30310) == {"a1"}
    assert two.pods(two.ext, two.node2.ipv4, 30310) == {"b1", "b2"}
    assert two.peers(two.ext, two.node2.ipv4, 30310) == {two.ext.ipv4}


def test_etp_local_without_local_endpoints_drops(two: Two) -> None:
    assert two.pods(two.ext, two.node1.ipv4, 30311, count=2) == {"timeout"}  # dropped, not rejected
    assert two.pods(two.ext, two.node2.ipv4, 30311, count=3) == {"b1"}


def test_etp_local_pod_and_node_traffic_short_circuits_to_all_endpoints(two: Two) -> None:
    assert two.pods(two.a2, "198.19.3.10", 80, count=40) == {"a1", "b1", "b2"}
    assert two.pods(two.a2, two.node1.ipv4, 30311, count=5) == {"b1"}  # no local endpoint, pod traffic still served
    assert two.pods(two.node1, two.node1.ipv4, 30311, count=5) == {"b1"}  # node's own traffic too


def test_cluster_ip_of_etp_local_service_uses_all_endpoints(two: Two) -> None:
    assert two.pods(two.a2, "10.96.3.10", 80, count=40) == {"a1", "b1", "b2"}


def test_itp_local(two: Two) -> None:
    assert two.pods(two.a2, "10.96.3.12", 80, count=30) == {"a1", "a2"}
    assert two.pods(two.b2, "10.96.3.12", 80, count=10) == {"b1"}
    # endpoints exist, none on node1: dropped (kube-proxy), not rejected
    assert two.pods(two.a1, "10.96.3.13", 80, count=2) == {"timeout"}
    assert two.pods(two.b2, "10.96.3.13", 80, count=3) == {"b1"}


def test_topology_zone_hints(two: Two) -> None:
    assert two.pods(two.a2, "10.96.3.14", 80, count=20) == {"a1"}  # zone-a
    assert two.pods(two.b2, "10.96.3.14", 80, count=30) == {"b1", "b2"}  # zone-b
    # one endpoint without hints: hints are ignored, all endpoints used
    assert two.pods(two.a2, "10.96.3.15", 80, count=30) == {"a1", "b1"}


def test_topology_same_node_hints(two: Two) -> None:
    assert two.pods(two.b2, "10.96.3.16", 80, count=10) == {"b1"}
    assert two.pods(two.a1, "10.96.3.16", 80, count=30) == {"a1", "a2"}


def test_load_balancer_source_ranges(two: Two) -> None:
    assert two.pods(two.ext, "198.19.3.17", 80, count=3) == {"a1"}  # allowed source
    assert two.pods(two.ext2, "198.19.3.17", 80, count=2) == {"timeout"}  # not in the ranges: dropped
    assert two.pods(two.ext2, two.node1.ipv4, 30317, count=3) == {"a1"}  # NodePorts are not filtered (upstream)


def test_local_policies_fall_back_to_serving_terminating_local_endpoints(two: Two) -> None:
    # no ready endpoint on node1: its serving terminating one (a2), not the remote ready b1
    assert two.pods(two.ext, two.node1.ipv4, 30318, count=6) == {"a2"}
    assert two.pods(two.a1, "10.96.3.18", 80, count=6) == {"a2"}
    # node2 has a ready one: only that
    assert two.pods(two.ext, two.node2.ipv4, 30318, count=6) == {"b1"}
