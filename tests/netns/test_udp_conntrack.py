"""UDP "connections" are conntrack entries that keep their DNAT. As kube-proxy's CleanStaleEntries,
after every successful sync an entry DNATed from a UDP frontend to an address that is no longer
one of the port's serving endpoints is deleted, so a client that keeps sending from the same
port moves to a remaining endpoint; a terminating endpoint that still serves keeps its flows
(they drain), and a port with no serving endpoint at all is left alone. This holds after a
partial sync, after a full one (a restart, a failed sync), and for `nftproxy apply` from a new
process: it is worked out from the current state, not from one delta.

The entries are listed and deleted over ctnetlink inside the process (nftproxy/nft/conntrack.py):
no `conntrack` process runs during a sync."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft import conntrack
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.conntrack import Entry, KernelConntrack, Tuple
from nftproxy.nft.fake import FakeBackend, FakeConntrack
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family, UdpFlow
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

SVC = Service("default", "dns", "NodePort", (ip_address("10.96.4.53"),), (ServicePort("dns", "UDP", 53, 30053),))
SVC6 = Service("default", "dns6", "ClusterIP", (ip_address("fd00:96::53"),), (ServicePort("dns", "UDP", 53),))
PREFIX = "ctnl-"  # the lab's namespaces: ctnl-<pid><letters>-*


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
    cleanup_stale(PREFIX)
    with NetLab(PREFIX) as nl:
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


def start(lab: Lab, backend: KernelBackend, ct: KernelConntrack | None, *eps: Endpoint) -> Dataplane:
    dp = Dataplane(backend, lab.config(), ct)
    dp.inputs.set_service(SVC)
    dp.inputs.set_slice(dns_slice(*eps))
    dp.sync()
    return dp


@pytest.mark.parametrize("clear", [True, False], ids=["cleared", "not-cleared (control)"])
def test_udp_client_moves_when_its_endpoint_is_removed(lab: Lab, clear: bool) -> None:
    backend = KernelBackend(lab.node.netns)
    ct = KernelConntrack(lab.node.netns)
    # the control: what a proxy that forgets conntrack does
    dp = start(lab, backend, ct if clear else None, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.set_slice(dns_slice(ep(lab.u2)))  # u1 removed (it keeps running: only conntrack would reach it)
    dp.sync()
    want = "u2" if clear else "u1"
    assert both_flows(lab) == (want, want)
    backend.close()
    ct.close()


def test_a_terminating_endpoint_keeps_its_flows_only_while_no_endpoint_is_ready(lab: Lab) -> None:
    """Alone, a terminating endpoint that still serves keeps its open flows (they drain, as
    kube-proxy). Once a ready endpoint exists, its flows are deleted (intentionally unlike
    kube-proxy, which waits until it stops serving): the next datagram goes to the ready one while
    the terminating one still answers, as a DNS client with one socket needs during a rollout."""
    backend, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    dp = start(lab, backend, ct, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.set_slice(dns_slice(ep(lab.u1, ready=False, terminating=True)))
    dp.sync()  # terminating, serving, alone: still used, its flows stay
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.set_slice(dns_slice(ep(lab.u1, ready=False, terminating=True), ep(lab.u2)))
    dp.sync()  # u2 is ready: u1's flows go, though it still serves
    assert both_flows(lab) == ("u2", "u2")
    backend.close()
    ct.close()


def test_a_port_without_serving_endpoints_loses_its_clusterip_flows_not_its_nodeport_flows(lab: Lab) -> None:
    """As kube-proxy v1.37 (kubernetes#139629): the last serving endpoint gone, the open flow to
    the ClusterIP is deleted (its next datagram meets the reject), the one to the NodePort is not
    (matched by port number alone, it could be anyone's)."""
    backend, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    dp = start(lab, backend, ct, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.set_slice(dns_slice())
    dp.sync()
    assert both_flows(lab) == ("refused", "u1")
    backend.close()
    ct.close()


@pytest.mark.parametrize("clear", [True, False], ids=["cleared", "not-cleared (control)"])
def test_a_deleted_service_loses_its_clusterip_flows_not_its_nodeport_flows(lab: Lab, clear: bool) -> None:
    """As kube-proxy 1.38 (kubernetes#141371), on every cluster: the Service deleted while its pod
    still runs, the client's open flow to the ClusterIP is deleted (its next datagram goes nowhere:
    upstream e2e "should clear conntrack entries when a UDP service is deleted"); the one to the
    NodePort is not (matched by port number alone, it could be anyone's). The control shows that
    the flow would otherwise go on reaching the pod."""
    backend, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    dp = start(lab, backend, ct if clear else None, ep(lab.u1))  # the control: no conntrack
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.delete_service("default/dns")  # its EndpointSlice stays (deleted a sync later, or never)
    dp.sync()
    cluster_ip, node_port = both_flows(lab)
    assert (cluster_ip == "u1") is (not clear), cluster_ip
    assert node_port == "u1"
    backend.close()
    ct.close()


def test_a_restarted_proxy_cleans_what_changed_while_it_was_away(lab: Lab) -> None:
    """A new process's first sync is a full one: the table read back says u1 went away."""
    first, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    start(lab, first, ct, ep(lab.u1))
    first.close()
    ct.close()
    assert both_flows(lab) == ("u1", "u1")
    second, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    result = start(lab, second, ct, ep(lab.u2)).sync()
    assert both_flows(lab) == ("u2", "u2")
    assert not result.full  # the second sync of that process: partial, nothing left to do
    second.close()
    ct.close()


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
    fake, ct = FakeBackend(), FakeConntrack()
    dp = Dataplane(fake, ProxyConfig(node_name="n"), ct)
    dp.inputs.set_service(SVC)
    dp.inputs.set_slice(_two())
    dp.sync()
    ct.flows[Family.IP] = list(FLOWS)
    dp.inputs.set_slice(EndpointSlice("default", "dns-1", "dns", "IPv4", _two().ports, _two().endpoints[1:]))
    dp.sync()
    assert sorted(f for _, f in ct.deleted) == [FLOWS[0], FLOWS[2]]


def test_a_deleted_service_or_port_loses_the_flows_to_its_addresses() -> None:
    """kube-proxy 1.38 (kubernetes#141371): a UDP Service deleted, or its UDP port removed, leaves
    no flow to its ClusterIP (whatever endpoint it went to); its NodePort's flows and another
    Service's are not ours to judge. A ClusterIP taken over in the same sync keeps the flows to
    the new Service's serving endpoints."""
    ct = FakeConntrack()
    dp = Dataplane(FakeBackend(), ProxyConfig(node_name="n"), ct)

    def after(change: Callable[[], None]) -> list[UdpFlow]:
        dp.inputs.set_service(SVC)
        dp.inputs.set_slice(_two())
        dp.sync()
        ct.flows[Family.IP] = list(FLOWS)
        ct.deleted.clear()
        change()
        dp.sync()
        return sorted(f for _, f in ct.deleted)

    assert after(lambda: dp.inputs.delete_service("default/dns")) == [FLOWS[0], FLOWS[1]]
    tcp_only = replace(SVC, ports=(ServicePort("dns-tcp", "TCP", 53, 30054),))
    assert after(lambda: dp.inputs.set_service(tcp_only)) == [FLOWS[0], FLOWS[1]]

    def taken_over() -> None:
        dp.inputs.delete_service("default/dns")
        dp.inputs.set_service(replace(SVC, name="dns-b"))
        dp.inputs.set_slice(replace(_two(), name="dns-b-1", service_name="dns-b", endpoints=_two().endpoints[1:]))

    assert after(taken_over) == [FLOWS[0], FLOWS[2]]  # judged by dns-b: 10.244.1.3 serves


def test_a_flow_to_the_old_target_port_of_a_serving_address_is_stale() -> None:
    """The Service's targetPort changed, the pods (addresses) stayed: a flow DNATed to the old
    port is deleted, one to the new port kept (upstream e2e: "Conntrack should be able to cleanup
    conntrack entries when UDP service target port changes for a NodePort service")."""
    fake, ct = FakeBackend(), FakeConntrack()
    dp = Dataplane(fake, ProxyConfig(node_name="n"), ct)
    dp.inputs.set_service(SVC)
    dp.inputs.set_slice(_two())
    dp.sync()
    old, new = UdpFlow("10.96.4.53", "53", "10.244.1.3", "5353"), UdpFlow("10.96.4.53", "53", "10.244.1.3", "5354")
    ct.flows[Family.IP] = [old, new]
    dp.inputs.set_slice(
        EndpointSlice("default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", 5354),), _two().endpoints)
    )
    dp.sync()
    assert [f for _, f in ct.deleted] == [old]


def test_after_a_failed_sync_the_full_one_cleans_up() -> None:
    """The failed sync's change is lost from the change log, but the full sync that follows
    checks every UDP frontend against the current state."""
    fake, ct = FakeBackend(), FakeConntrack()
    dp = Dataplane(fake, ProxyConfig(node_name="n"), ct)
    dp.inputs.set_service(SVC)
    dp.inputs.set_slice(_two())
    dp.sync()
    ct.flows[Family.IP] = list(FLOWS)
    dp.inputs.set_slice(EndpointSlice("default", "dns-1", "dns", "IPv4", _two().ports, _two().endpoints[1:]))
    fake.fail_next = "Error: injected"
    with pytest.raises(Exception, match="injected"):
        dp.sync()
    assert ct.deleted == []
    assert dp.sync().full
    assert sorted(f for _, f in ct.deleted) == [FLOWS[0], FLOWS[2]]


# -- ctnetlink on the real kernel --------------------------------------------------------------


def in_netns(netns: str, fn: Callable[[], object]) -> object:
    """``fn()`` on a throwaway thread inside ``netns`` (as the backend's worker thread)."""
    out: list[object] = []

    def run() -> None:
        try:
            netns_mod.enter(netns)
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def entries(lab: Lab, family: Family) -> list[Entry]:
    got = in_netns(lab.node.netns, lambda: conntrack.udp_entries(family))
    assert isinstance(got, list)
    return got


def send_from(lab: Lab, src: Pod, host: str, *sports: int) -> list[str | None]:
    """One datagram (three tries) from each source port: who answered."""
    return [lab.lab.probe(src, "udp", host, 53, count=1, timeout=1.0, source_port=p)[0].pod for p in sports]


def dual_stack(lab: Lab, backend: KernelBackend, *pods: Pod) -> None:
    dp = Dataplane(backend, lab.config())
    dp.inputs.set_service(SVC)
    dp.inputs.set_service(SVC6)
    dp.inputs.set_slice(dns_slice(*(ep(p) for p in pods)))
    eps6 = tuple(Endpoint(p.ipv6, True, True, False, p.node.name) for p in pods)
    dp.inputs.set_slice(EndpointSlice("default", "dns6-1", "dns6", "IPv6", (EndpointPort("dns", "UDP", 5353),), eps6))
    dp.sync()


@pytest.mark.parametrize("family", [Family.IP, Family.IP6], ids=["ipv4", "ipv6"])
def test_the_listing_finds_the_dnated_flows_with_their_tuples(lab: Lab, family: Family) -> None:
    backend = KernelBackend(lab.node.netns)
    dual_stack(lab, backend, lab.u1)
    v6 = family is Family.IP6
    c, u1, u2 = (p.ipv6 if v6 else p.ipv4 for p in (lab.client, lab.u1, lab.u2))
    vip = "fd00:96::53" if v6 else "10.96.4.53"
    assert send_from(lab, lab.client, vip, 40001, 40002) == ["u1", "u1"]
    # pod to pod, not DNATed: in the table, never listed
    assert lab.lab.probe(lab.client, "udp", u2, 5353, source_port=40003)[0].pod == "u2"
    got = sorted(entries(lab, family))
    assert [(e.orig, e.reply) for e in got] == [
        (Tuple(c, vip, 17, sport, 53), Tuple(u1, c, 17, 5353, sport)) for sport in (40001, 40002)
    ]
    assert all(e.id is not None and e.zone == 0 and e.status & conntrack.IPS_DST_NAT for e in got)
    other = Family.IP if v6 else Family.IP6
    assert all(e.orig.dst != vip for e in entries(lab, other))  # the dump is of one family
    backend.close()


@pytest.mark.parametrize("family", [Family.IP, Family.IP6], ids=["ipv4", "ipv6"])
def test_a_delete_removes_exactly_the_chosen_entries_and_a_gone_one_is_no_error(lab: Lab, family: Family) -> None:
    backend = KernelBackend(lab.node.netns)
    dual_stack(lab, backend, lab.u1)
    vip = "fd00:96::53" if family is Family.IP6 else "10.96.4.53"
    assert send_from(lab, lab.client, vip, 40001, 40002, 40003) == ["u1"] * 3
    before = sorted(entries(lab, family))
    assert [e.orig.sport for e in before] == [40001, 40002, 40003]
    chosen = before[1]
    assert in_netns(lab.node.netns, lambda: conntrack.delete_entries(family, [chosen])) == (1, 0)
    assert sorted(entries(lab, family)) == [before[0], before[2]]
    # deleted already: counted as gone, not an error
    assert in_netns(lab.node.netns, lambda: conntrack.delete_entries(family, [chosen])) == (0, 1)
    # by flow (frontend, port, endpoint): a flow to another endpoint matches nothing
    u1, u2 = (lab.u1.ipv6, lab.u2.ipv6) if family is Family.IP6 else (lab.u1.ipv4, lab.u2.ipv4)
    assert in_netns(lab.node.netns, lambda: conntrack.delete_udp_flows(family, [UdpFlow(vip, "53", u2)])) == 0
    assert len(entries(lab, family)) == 2
    assert in_netns(lab.node.netns, lambda: conntrack.delete_udp_flows(family, [UdpFlow(vip, "53", u1)])) == 2
    assert entries(lab, family) == []
    backend.close()


def test_no_conntrack_process_runs_during_a_sync(lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `conntrack` first on PATH that only leaves a trace: the sync that moves the flow never
    runs it (nor the real one, which it shadows)."""
    trace = tmp_path / "ran"
    fake = tmp_path / "bin" / "conntrack"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {trace}\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    backend, ct = KernelBackend(lab.node.netns), KernelConntrack(lab.node.netns)
    dp = start(lab, backend, ct, ep(lab.u1))
    assert both_flows(lab) == ("u1", "u1")
    dp.inputs.set_slice(dns_slice(ep(lab.u2)))
    cleanup = dp.sync().cleanups
    assert both_flows(lab) == ("u2", "u2")
    assert not trace.exists()
    assert [(c.conntrack, c.deleted, c.failed) for c in cleanup] == [(True, 2, False)]
    backend.close()
    ct.close()
