"""sessionAffinity: ClientIP with real connections: sticky per client across every frontend of a
Service port (ClusterIP, NodePort, externalIP), on IPv4 and IPv6, expiry, release on removal."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig, names
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.backend import NftError
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import DynamicElement, Family
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale

pytestmark = pytest.mark.netns

TIMEOUT = 2


CLUSTER_IP6 = "fd00:10:96::5:10"
EXTERNAL_IP = "198.19.5.10"  # routed to the node by the lab (EXTERNAL4)
EXTERNAL_IP6 = "fd00:198:19::5:10"
TAG = names.port_tag("default/sticky", "http", "tcp")


def sticky(timeout: int = TIMEOUT) -> Service:
    return Service(
        "default",
        "sticky",
        "NodePort",
        (ip_address("10.96.5.10"), ip_address(CLUSTER_IP6)),
        (ServicePort("http", "TCP", 80, 30510),),
        external_ips=(ip_address(EXTERNAL_IP), ip_address(EXTERNAL_IP6)),
        session_affinity_timeout=timeout,
    )


def eps(*pods: Pod) -> EndpointSlice:
    return EndpointSlice(
        "default",
        "sticky-1",
        "sticky",
        "IPv4",
        (EndpointPort("http", "TCP", 8080),),
        tuple(Endpoint(p.ipv4, True, True, False, p.node.name) for p in pods),
    )


def eps6(*pods: Pod) -> EndpointSlice:
    return EndpointSlice(
        "default",
        "sticky-6",
        "sticky",
        "IPv6",
        (EndpointPort("http", "TCP", 8080),),
        tuple(Endpoint(p.ipv6, True, True, False, p.node.name) for p in pods),
    )


def records(dp: Dataplane, family: Family = Family.IP, timeout: int = TIMEOUT) -> list[DynamicElement]:
    return dp.backend.read_dynamic(family, "nftproxy", names.affinity_map(TAG, timeout))


@dataclass
class Lab:
    lab: NetLab
    node: Node
    pods: list[Pod]
    client: Pod
    other: Pod
    ext: Client
    dp: Dataplane

    def who(self, src: Pod | Client, host: str = "10.96.5.10", port: int = 80, count: int = 8) -> list[str | None]:
        """Which pod answered each of ``count`` fresh connections (or the error)."""
        return [r.pod or r.error for r in self.lab.probe(src, "tcp", host, port, count=count, timeout=1.0)]


@pytest.fixture
def lab() -> Iterator[Lab]:
    cleanup_stale()
    with NetLab() as nl:
        node = nl.add_node("node1", 1)
        pods = [nl.add_pod(node, f"e{i}", tcp=(8080,), udp=()) for i in range(3)]
        client, other = nl.add_pod(node, "client", tcp=(), udp=()), nl.add_pod(node, "other", tcp=(), udp=())
        backend = KernelBackend(node.netns)
        cfg = ProxyConfig(
            node_name="node1",
            node_ips=(ip_address(node.ipv4), ip_address(node.ipv6)),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
        )
        dp = Dataplane(backend, cfg)
        dp.inputs.set_service(sticky())
        dp.inputs.set_slice(eps(*pods))
        dp.inputs.set_slice(eps6(*pods))
        dp.sync()
        yield Lab(nl, node, pods, client, other, nl.add_client("ext", 100, via=node), dp)
        backend.close()


def test_same_client_same_endpoint(lab: Lab) -> None:
    seen = lab.who(lab.client, count=12)
    assert len(set(seen)) == 1 and seen[0] in {"e0", "e1", "e2"}, seen
    nodeport = lab.who(lab.ext, lab.node.ipv4, 30510, count=12)
    assert len(set(nodeport)) == 1 and nodeport[0] in {"e0", "e1", "e2"}, nodeport


def test_turning_affinity_off_releases_existing_clients_at_once(lab: Lab) -> None:
    """kube-proxy stops honouring a Service's affinity as soon as it is turned off: a client
    pinned for 3 hours is balanced again at its next connection, no sleeping past a timeout."""
    lab.dp.inputs.set_service(sticky(10800))
    lab.dp.sync()
    pinned = lab.who(lab.client, count=6)
    assert len(set(pinned)) == 1, pinned
    assert [e.value[0] for e in records(lab.dp, timeout=10800)] == [
        next(p.ipv4 for p in lab.pods if p.name == pinned[0])
    ]
    lab.dp.inputs.set_service(dataclasses.replace(sticky(), session_affinity_timeout=None))
    lab.dp.sync()
    after = set(lab.who(lab.client, count=30))
    assert len(after) > 1, after  # (1/3)^29 chance of a false alarm


def test_a_changed_timeout_releases_the_entries_of_the_old_one(lab: Lab) -> None:
    lab.dp.inputs.set_service(sticky(10800))
    lab.dp.sync()
    assert len(set(lab.who(lab.client, count=4))) == 1
    assert {e.timeout for e in records(lab.dp, timeout=10800)} == {10800}
    lab.dp.inputs.set_service(sticky(600))
    lab.dp.sync()
    with pytest.raises(NftError):  # the old record went with its timeout
        records(lab.dp, timeout=10800)
    assert records(lab.dp, timeout=600) == []
    assert len(set(lab.who(lab.client, count=4))) == 1  # sticky again, under the new timeout
    assert {e.timeout for e in records(lab.dp, timeout=600)} == {600}


def expiries_until_moved(lab: Lab, family: Family, host: str = "10.96.5.10") -> set[str | None]:
    """Connect once, let the record expire (the kernel's record is gone: checked every round),
    and again, until the client lands on another endpoint: each round is a fresh 1-in-3 draw,
    so 16 rounds on one endpoint is (1/3)^15, about 7e-8, not bad luck."""
    seen: set[str | None] = set()
    for _ in range(16):
        seen.add(lab.who(lab.client, host, count=1)[0])
        assert len(records(lab.dp, family)) == 1
        time.sleep(TIMEOUT + 0.6)
        assert records(lab.dp, family) == [], f"the record outlived its {TIMEOUT}s timeout"
        if len(seen) > 1:
            break
    return seen


def test_affinity_expires(lab: Lab) -> None:
    seen = expiries_until_moved(lab, Family.IP)
    assert len(seen) > 1 and seen <= {"e0", "e1", "e2"}, f"never moved after {TIMEOUT}s expiries: {seen}"


@pytest.mark.parametrize("release", [True, False], ids=["released", "not-released (control)"])
def test_removed_endpoint_releases_its_clients(lab: Lab, release: bool) -> None:
    stuck = lab.who(lab.client, count=4)
    assert len(set(stuck)) == 1
    if not release:  # the control: a proxy that leaves the kernel's affinity records alone
        lab.dp.stale.release_affinity = lambda a, table, full: None  # type: ignore[method-assign]
    gone = next(p for p in lab.pods if p.name == stuck[0])
    lab.dp.inputs.set_slice(eps(*[p for p in lab.pods if p is not gone]))
    lab.dp.sync()
    after = lab.who(lab.client, count=8)
    if release:
        assert gone.name not in after and len(set(after)) == 1 and None not in after, after
    else:  # the record still points to the removed endpoint (its pod still answers here)
        assert set(after) == {gone.name}, after


def test_a_client_keeps_its_endpoint_across_every_frontend(lab: Lab) -> None:
    """kube-proxy keeps one record per client and Service port (per endpoint, keyed by the
    client): the endpoint chosen through the ClusterIP is kept through the NodePort and the
    externalIP, and back. Each frontend alone would choose afresh: (1/3)^k per step."""
    for attempt in range(3):  # several clients' worth: each starts from a fresh record
        first = lab.who(lab.client, count=1)[0]
        assert first in {"e0", "e1", "e2"}, first
        seen = lab.who(lab.client, lab.node.ipv4, 30510, count=6)
        seen += lab.who(lab.client, EXTERNAL_IP, 80, count=6)
        seen += lab.who(lab.client, count=6)
        assert set(seen) == {first}, (attempt, first, seen)
        lab.lab.exec(lab.node.netns, "nft", "flush", "map", "ip", "nftproxy", names.affinity_map(TAG, TIMEOUT))
    # the same from outside the cluster: the NodePort, then the externalIP
    first = lab.who(lab.ext, lab.node.ipv4, 30510, count=1)[0]
    assert set(lab.who(lab.ext, EXTERNAL_IP, 80, count=8)) == {first}


def test_ipv6_affinity_with_real_packets(lab: Lab) -> None:
    """IPv6 too (nft 1.0.6 could not record ``ipv6_addr . inet_service``; the record keeps the
    address and the port in two maps): sticky on the ClusterIP, the NodePort and the externalIP."""
    first = lab.who(lab.client, CLUSTER_IP6, count=1)[0]
    assert first in {"e0", "e1", "e2"}, first
    seen = lab.who(lab.client, CLUSTER_IP6, count=8)
    seen += lab.who(lab.client, lab.node.ipv6, 30510, count=6)
    seen += lab.who(lab.client, EXTERNAL_IP6, 80, count=6)
    assert set(seen) == {first}, seen
    want = next(p.ipv6 for p in lab.pods if p.name == first)
    assert [e.value for e in records(lab.dp, Family.IP6)] == [(want,)]
    assert [e.value for e in lab.dp.backend.read_dynamic(
        Family.IP6, "nftproxy", names.affinity_port_map(TAG, TIMEOUT))] == [("8080",)]  # fmt: skip


def test_ipv6_affinity_expires(lab: Lab) -> None:
    seen = expiries_until_moved(lab, Family.IP6, CLUSTER_IP6)
    assert len(seen) > 1 and seen <= {"e0", "e1", "e2"}, f"never moved after {TIMEOUT}s expiries: {seen}"


def test_removed_ipv6_endpoint_releases_its_clients(lab: Lab) -> None:
    stuck = lab.who(lab.client, CLUSTER_IP6, count=4)
    assert len(set(stuck)) == 1
    gone = next(p for p in lab.pods if p.name == stuck[0])
    lab.dp.inputs.set_slice(eps6(*[p for p in lab.pods if p is not gone]))
    lab.dp.sync()
    assert records(lab.dp, Family.IP6) == []
    after = lab.who(lab.client, CLUSTER_IP6, count=8)
    assert gone.name not in after and len(set(after)) == 1 and None not in after, after


def test_records_survive_a_restart(lab: Lab) -> None:
    """A new process adopts the table (full sync against the kernel's): the dynamic records are
    neither recreated nor released, so clients stay on their endpoints, on both families."""
    first4 = lab.who(lab.client, count=1)[0]
    first6 = lab.who(lab.client, CLUSTER_IP6, count=1)[0]
    dp = Dataplane(lab.dp.backend, lab.dp.config)
    dp.inputs.set_service(sticky())
    dp.inputs.set_slice(eps(*lab.pods))
    dp.inputs.set_slice(eps6(*lab.pods))
    assert dp.sync().full
    assert len(records(dp)) == 1 and len(records(dp, Family.IP6)) == 1
    assert set(lab.who(lab.client, count=6)) == {first4}
    assert set(lab.who(lab.client, CLUSTER_IP6, count=6)) == {first6}
