"""UDP: when an endpoint goes away, its conntrack entries go too, so a client that keeps sending
from the same port (the same UDP "connection") moves to a remaining endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from testkit.netlab import Client, NetLab, Node, Pod, cleanup_stale

pytestmark = pytest.mark.netns

SVC = Service("default", "dns", "NodePort", (ip_address("10.96.4.53"),), (ServicePort("dns", "UDP", 53, 30053),))


def dns_slice(*pods: Pod) -> EndpointSlice:
    eps = tuple(Endpoint(p.ipv4, True, True, False, p.node.name) for p in pods)
    return EndpointSlice("default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", 5353),), eps)


@dataclass
class Lab:
    lab: NetLab
    node: Node
    u1: Pod
    u2: Pod
    client: Pod
    ext: Client


@pytest.fixture
def lab() -> Iterator[Lab]:
    cleanup_stale()
    with NetLab() as nl:
        node = nl.add_node("node1", 1)
        u1, u2, c = (nl.add_pod(node, n, tcp=(), udp=(5353,)) for n in ("u1", "u2", "c"))
        yield Lab(nl, node, u1, u2, c, nl.add_client("ext", 100, via=node))


def same_flow(lab: Lab, src: Pod | Client, host: str, port: int) -> str | None:
    """Three datagrams from the same source port: who answers the last."""
    res = lab.lab.probe(src, "udp", host, port, count=3, timeout=1.0, source_port=40053)
    return res[-1].pod or res[-1].error


@pytest.mark.parametrize("clear", [True, False], ids=["cleared", "not-cleared (control)"])
def test_udp_client_moves_when_its_endpoint_is_removed(lab: Lab, clear: bool) -> None:
    backend = KernelBackend(lab.node.netns)
    if not clear:  # the control: what a proxy that forgets conntrack does
        backend.clear_udp_conntrack = lambda family, entries: None  # type: ignore[method-assign]
    cfg = ProxyConfig(
        node_name="node1", node_ips=(ip_address(lab.node.ipv4),), cluster_cidrs=(ip_network("10.244.0.0/16"),)
    )
    dp = Dataplane(backend, cfg)
    dp.set_service(SVC)
    dp.set_slice(dns_slice(lab.u1))
    dp.sync()
    assert same_flow(lab, lab.client, "10.96.4.53", 53) == "u1"
    assert same_flow(lab, lab.ext, lab.node.ipv4, 30053) == "u1"

    dp.set_slice(dns_slice(lab.u2))  # u1 removed (it keeps running: only conntrack would reach it)
    dp.sync()
    want = "u2" if clear else "u1"
    assert same_flow(lab, lab.client, "10.96.4.53", 53) == want
    assert same_flow(lab, lab.ext, lab.node.ipv4, 30053) == want
    backend.close()


def test_stale_entries_are_computed_per_frontend() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, ProxyConfig(node_name="n"))
    two = EndpointSlice(
        "default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", 5353),),
        (Endpoint("10.244.1.2", True, True, False), Endpoint("10.244.1.3", True, True, False)),
    )  # fmt: skip
    dp.set_service(SVC)
    dp.set_slice(two)
    dp.sync()
    dp.set_slice(EndpointSlice("default", "dns-1", "dns", "IPv4", two.ports, two.endpoints[1:]))
    dp.sync()
    assert sorted(fake.conntrack_cleared) == [
        (Family.IP, "", "30053", "10.244.1.2"),
        (Family.IP, "10.96.4.53", "53", "10.244.1.2"),
    ]
