"""UDP "connections" are conntrack entries that keep their DNAT. As kube-proxy's CleanStaleEntries,
after every successful sync an entry DNATed from a UDP frontend to an address that is no longer
one of the port's serving endpoints is deleted, so a client that keeps sending from the same
port moves to a remaining endpoint; a terminating endpoint that still serves keeps its flows
(they drain), and a port with no serving endpoint at all is left alone. This holds after a
partial sync, after a full one (a restart, a failed sync), and for `nftproxy apply` from a new
process: it is worked out from the current state, not from one delta."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.conntrack import parse as parse_conntrack
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family, UdpFlow
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

SVC = Service("default", "dns", "NodePort", (ip_address("10.96.4.53"),), (ServicePort("dns", "UDP", 53, 30053),))


def ep(p: Pod, ready: bool = True, serving: bool = True, terminating: bool = False) -> Endpoint:
    return Endpoint(p.ipv4, ready, serving, terminating, p.node.name)


def dns_slice(*eps: Endpoint) -> EndpointSlice:
    return EndpointSlice("default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", 5353),), eps)


@dataclass
class Lab:
    lab: NetLab
    node: Node
    u1: Pod
    u2: Pod
    client: Pod
    ext: Client

    def config(self) -> ProxyConfig:
        return ProxyConfig(
            node_name="node1", node_ips=(ip_address(self.node.ipv4),), cluster_cidrs=(ip_network("10.244.0.0/16"),)
        )


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


def both_flows(lab: Lab) -> tuple[str | None, str | None]:
    """The same flow from a pod to the ClusterIP, and from outside to the NodePort."""
    return same_flow(lab, lab.client, "10.96.4.53", 53), same_flow(lab, lab.ext, lab.node.ipv4, 30053)


def start(lab: Lab, backend: KernelBackend, *eps: Endpoint) -> Dataplane:
    dp = Dataplane(backend, lab.config())
    dp.set_service(SVC)
    dp.set_slice(dns_slice(*eps))
    dp.sync()
    return dp


@pytest.mark.parametrize("clear", [True, False], ids=["cleared", "not-cleared (control)"])
def test_udp_client_moves_when_its_endpoint_is_removed(lab: Lab, clear: bool) -> None:
    backend = KernelBackend(lab.node.netns)
    if not clear:  # the control: what a proxy that forgets conntrack does
        backend.delete_udp_flows = lambda family, flows: None  # type: ignore[method-assign]
    dp = start(lab, backend, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.set_slice(dns_slice(ep(lab.u2)))  # u1 removed (it keeps running: only conntrack would reach it)
    dp.sync()
    want = "u2" if clear else "u1"
    assert both_flows(lab) == (want, want)
    backend.close()


def test_a_terminating_endpoint_that_still_serves_keeps_its_flows(lab: Lab) -> None:
    """kube-proxy deletes only entries whose endpoint is no longer serving: open flows drain."""
    backend = KernelBackend(lab.node.netns)
    dp = start(lab, backend, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.set_slice(dns_slice(ep(lab.u1, ready=False, terminating=True), ep(lab.u2)))
    dp.sync()  # u1 is out of the map (u2 is ready) but still serving: its flows stay
    assert both_flows(lab) == ("u1", "u1")
    dp.set_slice(dns_slice(ep(lab.u1, ready=False, serving=False, terminating=True), ep(lab.u2)))
    dp.sync()  # no longer serving: its flows go
    assert both_flows(lab) == ("u2", "u2")
    backend.close()


def test_a_port_without_serving_endpoints_loses_its_clusterip_flows_not_its_nodeport_flows(lab: Lab) -> None:
    """As kube-proxy v1.37 (kubernetes#139629): the last serving endpoint gone, the open flow to
    the ClusterIP is deleted (its next datagram meets the reject), the one to the NodePort is not
    (matched by port number alone, it could be anyone's)."""
    backend = KernelBackend(lab.node.netns)
    dp = start(lab, backend, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.set_slice(dns_slice())
    dp.sync()
    assert both_flows(lab) == ("refused", "u1")
    backend.close()


def test_a_restarted_proxy_cleans_what_changed_while_it_was_away(lab: Lab) -> None:
    """A new process's first sync is a full one: the table read back says u1 went away."""
    first = KernelBackend(lab.node.netns)
    start(lab, first, ep(lab.u1))
    first.close()
    assert both_flows(lab) == ("u1", "u1")
    second = KernelBackend(lab.node.netns)
    result = start(lab, second, ep(lab.u2)).sync()
    assert both_flows(lab) == ("u2", "u2")
    assert not result.full  # the second sync of that process: partial, nothing left to do
    second.close()


def test_nftproxy_apply_moves_the_flow_to_the_new_endpoint(lab: Lab, tmp_path: Path) -> None:
    def apply(pod: Pod) -> None:
        objs = [
            k.service("dns", ["10.96.4.53"], [k.port(53, "dns", "UDP", node_port=30053)], type="NodePort"),
            k.endpoint_slice("dns-1", "dns", [k.endpoint(pod.ipv4, node="node1")], [k.port(5353, "dns", "UDP")]),
        ]
        path = k.write(tmp_path / "dns.yaml", objs)
        argv = nftproxy_argv("apply", "-f", str(path), "--node-name", "node1")
        argv += ["--node-ip", lab.node.ipv4, "--cluster-cidr", "10.244.0.0/16"]
        r = subprocess.run(["ip", "netns", "exec", lab.node.netns, *argv], capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr

    apply(lab.u1)
    assert both_flows(lab) == ("u1", "u1")
    apply(lab.u2)
    assert both_flows(lab) == ("u2", "u2")


def test_conntrack_listing_is_parsed() -> None:
    text = (
        "udp      17 29 src=10.244.0.5 dst=10.96.4.53 sport=40053 dport=53 src=10.244.0.3 dst=10.244.0.5 "
        "sport=5353 dport=40053 mark=0 use=1\n"
        "udp      17 20 src=10.0.0.1 dst=10.0.0.2 sport=5000 dport=7 [UNREPLIED] src=10.0.0.2 dst=10.0.0.1 "
        "sport=7 dport=5000 mark=0 use=1\n"  # not DNATed: never a candidate
        "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.\n"
    )
    assert parse_conntrack(text) == [UdpFlow("10.96.4.53", "53", "10.244.0.3")]


def _two() -> EndpointSlice:
    return EndpointSlice(
        "default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", 5353),),
        (Endpoint("10.244.1.2", True, True, False), Endpoint("10.244.1.3", True, True, False)),
    )  # fmt: skip


FLOWS = [
    UdpFlow("10.96.4.53", "53", "10.244.1.2"),  # ClusterIP -> the endpoint that goes
    UdpFlow("10.96.4.53", "53", "10.244.1.3"),  # … -> the one that stays
    UdpFlow("198.18.0.1", "30053", "10.244.1.2"),  # NodePort on a node address
    UdpFlow("10.96.9.9", "53", "10.244.1.2"),  # another Service's IP: not ours to judge
]


def test_stale_flows_are_those_of_frontends_to_non_serving_addresses() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, ProxyConfig(node_name="n"))
    dp.set_service(SVC)
    dp.set_slice(_two())
    dp.sync()
    fake.flows[Family.IP] = list(FLOWS)
    dp.set_slice(EndpointSlice("default", "dns-1", "dns", "IPv4", _two().ports, _two().endpoints[1:]))
    dp.sync()
    assert sorted(f for _, f in fake.flows_deleted) == [FLOWS[0], FLOWS[2]]


def test_after_a_failed_sync_the_full_one_cleans_up() -> None:
    """The failed sync's change is lost from the change log, but the full sync that follows
    checks every UDP frontend against the current state."""
    fake = FakeBackend()
    dp = Dataplane(fake, ProxyConfig(node_name="n"))
    dp.set_service(SVC)
    dp.set_slice(_two())
    dp.sync()
    fake.flows[Family.IP] = list(FLOWS)
    dp.set_slice(EndpointSlice("default", "dns-1", "dns", "IPv4", _two().ports, _two().endpoints[1:]))
    fake.fail_next = "Error: injected"
    with pytest.raises(Exception, match="injected"):
        dp.sync()
    assert fake.flows_deleted == []
    assert dp.sync().full
    assert sorted(f for _, f in fake.flows_deleted) == [FLOWS[0], FLOWS[2]]
