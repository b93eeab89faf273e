"""Conntrack is a dependency of the dataplane of its own (as kube-proxy's conntrack.Interface),
not part of the nftables backend; and the readers of a table go through the backend's protocol.
The real kernel: tests/netns/test_udp_conntrack.py, tests/netns/test_explain_trace.py."""

from __future__ import annotations

from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.tableview import read_view, view_of
from nftproxy.nft.fake import FakeBackend, FakeConntrack
from nftproxy.nft.objects import Family, UdpFlow
from testkit.k8s import objects as k
from tests.support.builders import CFG

VIP = "10.96.4.53"


def _dns(dp: Dataplane, endpoint: str) -> None:
    svc = k.parsed(k.service("dns", [VIP], [k.port(53, "dns", "UDP")]))
    eps = k.parsed(k.endpoint_slice("dns-1", "dns", [k.endpoint(endpoint, node="n1")], [k.port(5353, "dns", "UDP")]))
    dp.inputs.set_service(svc)
    dp.inputs.set_slice(eps)


def test_the_dataplane_clears_stale_udp_flows_through_its_conntrack() -> None:
    fake, ct = FakeBackend(), FakeConntrack()
    dp = Dataplane(fake, CFG, ct)
    _dns(dp, "10.244.1.2")
    dp.sync()
    stale = [UdpFlow(VIP, "53", "10.244.1.2", "5353"), UdpFlow(VIP, "53", "10.244.1.2", "5354")]
    ct.flows[Family.IP] = list(stale)
    _dns(dp, "10.244.1.3")
    cleanups = dp.sync().cleanups
    assert ct.deleted == [(Family.IP, f) for f in stale]
    assert ct.flows[Family.IP] == []
    assert [(c.family, c.conntrack, c.deleted, c.failed) for c in cleanups] == [(Family.IP, True, 2, False)]


def test_a_dataplane_without_conntrack_leaves_udp_flows_to_expire() -> None:
    dp = Dataplane(FakeBackend(), CFG)
    _dns(dp, "10.244.1.2")
    dp.sync()
    _dns(dp, "10.244.1.3")
    assert not any(c.conntrack for c in dp.sync().cleanups)


def test_the_fake_conntrack_deletes_what_it_is_asked_and_counts_entries() -> None:
    ct = FakeConntrack()
    stays = UdpFlow(VIP, "53", "10.244.1.3", "5353")
    ct.flows[Family.IP] = [UdpFlow(VIP, "53", "10.244.1.2", "5353"), UdpFlow(VIP, "53", "10.244.1.2", "53"), stays]
    assert ct.delete_udp_flows(Family.IP, [UdpFlow(VIP, "53", "10.244.1.2", "53")]) == 1
    assert ct.delete_udp_flows(Family.IP, [UdpFlow(VIP, "53", "10.244.1.2")]) == 1
    assert ct.udp_flows(Family.IP) == [stays] and ct.udp_flows(Family.IP6) == []


def test_a_table_view_reads_through_the_backend_protocol() -> None:
    """``read_view`` asks any Backend (the fake here) for its chains' rules: what the kernel's
    listing gives is what was compiled."""
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    _dns(dp, "10.244.1.2")
    dp.sync()
    want = next(t for t in dp.tables() if t.family is Family.IP)
    assert read_view(fake, Family.IP, "nftproxy") == view_of(want)
    assert read_view(fake, Family.IP, "nope") is None
