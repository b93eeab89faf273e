"""sessionAffinity: ClientIP with real connections: sticky per client, expiry, release on removal."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale

pytestmark = pytest.mark.netns

TIMEOUT = 2


def sticky(timeout: int = TIMEOUT) -> Service:
    return Service(
        "default",
        "sticky",
        "NodePort",
        (ip_address("10.96.5.10"),),
        (ServicePort("http", "TCP", 80, 30510),),
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
            node_name="node1", node_ips=(ip_address(node.ipv4),), cluster_cidrs=(ip_network("10.244.0.0/16"),)
        )
        dp = Dataplane(backend, cfg)
        dp.set_service(sticky())
        dp.set_slice(eps(*pods))
        dp.sync()
        yield Lab(nl, node, pods, client, other, nl.add_client("ext", 100, via=node), dp)
        backend.close()


def test_same_client_same_endpoint(lab: Lab) -> None:
    seen = lab.who(lab.client, count=12)
    assert len(set(seen)) == 1 and seen[0] in {"e0", "e1", "e2"}, seen
    nodeport = lab.who(lab.ext, lab.node.ipv4, 30510, count=12)
    assert len(set(nodeport)) == 1 and nodeport[0] in {"e0", "e1", "e2"}, nodeport


@pytest.mark.parametrize("release", [True, False], ids=["released", "not-released (control)"])
def test_turning_affinity_off_releases_existing_clients_at_once(lab: Lab, release: bool) -> None:
    """kube-proxy stops honouring a Service's affinity as soon as it is turned off: a client
    pinned for 3 hours is balanced again at its next connection, no sleeping past a timeout."""
    lab.dp.set_service(sticky(10800))
    lab.dp.sync()
    pinned = lab.who(lab.client, count=6)
    assert len(set(pinned)) == 1, pinned
    if not release:  # the control: a proxy that leaves the kernel's affinity entries alone
        lab.dp._release_affinity = lambda a: None  # type: ignore[method-assign]
    lab.dp.set_service(dataclasses.replace(sticky(), session_affinity_timeout=None))
    lab.dp.sync()
    after = set(lab.who(lab.client, count=30))
    if release:
        assert len(after) > 1, after  # (1/3)^29 chance of a false alarm
    else:
        assert after == set(pinned)


def test_a_changed_timeout_releases_the_entries_of_the_old_one(lab: Lab) -> None:
    lab.dp.set_service(sticky(10800))
    lab.dp.sync()
    assert len(set(lab.who(lab.client, count=4))) == 1
    backend = lab.dp.backend
    assert {e.timeout for e in backend.read_dynamic(Family.IP, "nftproxy", "affinity")} == {10800}
    lab.dp.set_service(sticky(600))
    lab.dp.sync()
    assert backend.read_dynamic(Family.IP, "nftproxy", "affinity") == []
    assert len(set(lab.who(lab.client, count=4))) == 1  # sticky again, under the new timeout
    assert {e.timeout for e in backend.read_dynamic(Family.IP, "nftproxy", "affinity")} == {600}


def test_affinity_expires(lab: Lab) -> None:
    first: set[str | None] = set()
    for _ in range(6):  # after each expiry the client may land elsewhere
        first.add(lab.who(lab.client, count=1)[0])
        time.sleep(TIMEOUT + 0.6)
    assert len(first) > 1, f"never moved after {TIMEOUT}s expiries: {first}"  # (1/3)^5 chance of a false alarm


def test_removed_endpoint_releases_its_clients(lab: Lab) -> None:
    stuck = lab.who(lab.client, count=4)
    assert len(set(stuck)) == 1
    gone = next(p for p in lab.pods if p.name == stuck[0])
    lab.dp.set_slice(eps(*[p for p in lab.pods if p is not gone]))
    lab.dp.sync()
    after = lab.who(lab.client, count=8)
    assert gone.name not in after and len(set(after)) == 1 and None not in after, after
