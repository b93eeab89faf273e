"""Differences from the real kube-proxy found by tests/conformance, pinned as unit tests.

Each test names the kube-proxy v1.34 behaviour it checks (pkg/proxy/endpointslicecache.go,
topology.go, endpointschangetracker.go) and was seen failing before the fix."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from nftproxy.compiler import ProxyConfig
from nftproxy.compiler.endpoints import categorize, targets
from nftproxy.compiler.fragment import compile_fragment
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.parse import parse_endpoint_slice
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family

CFG = ProxyConfig(
    node_name="n1",
    node_ips=(ip_address("198.18.0.1"),),
    cluster_cidrs=(ip_network("10.244.0.0/16"),),
)
PORT = ServicePort("http", "TCP", 80)


def _slice(name: str, *endpoints: Endpoint) -> EndpointSlice:
    return EndpointSlice("default", name, "web", "IPv4", (EndpointPort("http", "TCP", 8080),), endpoints)


def test_unset_serving_means_serving() -> None:
    """endpointslicecache.go: serving := Conditions.Serving == nil || *Conditions.Serving."""
    obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web-a", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.1.2"], "conditions": {"ready": False, "terminating": True}},
            {"addresses": ["10.244.1.3"], "conditions": {}},
            {"addresses": ["10.244.1.4"]},
        ],
    }
    sl = parse_endpoint_slice(obj)
    assert isinstance(sl, EndpointSlice)
    e1, e2, e3 = sl.endpoints
    assert (e1.ready, e1.serving, e1.terminating) == (False, True, True)
    assert (e2.ready, e2.serving, e2.terminating) == (True, True, False)
    assert (e3.ready, e3.serving, e3.terminating) == (True, True, False)
    # ... so the terminating one is the fallback when nothing is ready
    cat = categorize(targets(PORT, [_slice("x", e1)]), "n1", None)
    assert [t.address for t in cat.cluster] == ["10.244.1.2"]


def test_health_check_counts_only_ready_local_endpoints() -> None:
    """endpointschangetracker.go getLocalReadyEndpointIPs: a node whose only local endpoint is
    serving+terminating answers its healthCheckNodePort with 0 endpoints (503), while traffic
    still goes to that endpoint (the fallback)."""
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    lb = Service(
        "default",
        "web",
        "LoadBalancer",
        (IPv4Address("10.96.0.10"),),
        (ServicePort("http", "TCP", 80, 30080),),
        load_balancer_ips=(IPv4Address("198.19.0.10"),),
        external_traffic_policy="Local",
        health_check_node_port=32000,
    )
    dp.inputs.set_service(lb)
    terminating = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n1")
    remote = Endpoint("10.244.2.2", ready=True, serving=True, terminating=False, node_name="n2")
    dp.inputs.set_slice(_slice("web-a", terminating, remote))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 0})}
    ready = Endpoint("10.244.1.3", ready=True, serving=True, terminating=False, node_name="n1")
    dp.inputs.set_slice(_slice("web-a", terminating, remote, ready))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 1})}


def test_duplicate_endpoint_the_non_terminating_copy_wins() -> None:
    """endpointslicecache.go (v1.36+, kubernetes#135593): of duplicates (same ip:port), a
    non-terminating copy replaces a terminating one, whatever the slice order and node."""
    old = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n1")
    new = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n2")
    for order in ([_slice("a", old), _slice("b", new)], [_slice("a", new), _slice("b", old)]):
        got = targets(PORT, order, "n1")
        assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", "n2")]
        assert categorize(got, "n1", None).local == []  # the local copy is gone: none local
    for eps in ((old, new), (new, old)):  # within one slice too
        got = targets(PORT, [_slice("a", *eps)], "n1")
        assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", "n2")]


def test_duplicate_endpoint_between_equals_in_two_slices_the_copy_on_this_node_wins() -> None:
    """Two non-terminating copies in two slices: upstream's choice follows Go's map order
    (random); ours is the copy on this node, at every sync."""
    remote = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n2")
    local = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n1")
    for order in ([_slice("a", remote), _slice("b", local)], [_slice("a", local), _slice("b", remote)]):
        got = targets(PORT, order, "n1")
        assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", "n1")]
    # without a node name: the later copy
    assert targets(PORT, [_slice("a", remote), _slice("b", local)])[0].endpoint.node_name == "n1"


def test_duplicate_endpoint_within_one_slice_as_upstream() -> None:
    """endpointslicecache.go addEndpoints, within one slice: a later copy replaces an earlier one
    unless it is terminating, wherever the copies are (case dup-in-one-slice-both-ready)."""
    remote = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n2")
    local = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n1")
    for eps, node in (((remote, local), "n1"), ((local, remote), "n2")):
        got = targets(PORT, [_slice("a", *eps)], "n1")
        assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", node)]
        got = targets(PORT, [_slice("a", *eps), _slice("b")], "n1")  # the same beside another slice
        assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", node)]
    gone_here = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n1")
    gone_there = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n2")
    got = targets(PORT, [_slice("a", gone_there, gone_here)], "n1")  # two terminating: the first stays
    assert [(t.address, t.endpoint.node_name) for t in got] == [("10.244.1.2", "n2")]


def test_dual_stack_health_check_counts_one_family() -> None:
    """kube-proxy's IPv4 and IPv6 proxiers each serve the port on their own family's addresses
    and report their own family's local ready endpoints: one local endpoint per family answers
    localEndpoints=1 on each (tests/conformance case dual-stack-lb)."""
    dp = Dataplane(FakeBackend(), CFG)
    dp.inputs.set_service(
        Service(
            "default",
            "web",
            "LoadBalancer",
            (IPv4Address("10.96.0.10"), IPv6Address("fd00:10:96::10")),
            (ServicePort("http", "TCP", 80, 30080),),
            external_traffic_policy="Local",
            health_check_node_port=32000,
        )
    )
    v4 = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n1")
    v6 = Endpoint("fd00:10:244:1::3", ready=True, serving=True, terminating=False, node_name="n1")
    dp.inputs.set_slice(_slice("web-v4", v4))
    dp.inputs.set_slice(EndpointSlice("default", "web-v6", "web", "IPv6", (EndpointPort("http", "TCP", 8080),), (v6,)))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 1, 6: 1})}


def _allowed(
    ranges: list[str], config: ProxyConfig, lb_ips: tuple[str, ...] = ("198.19.0.9", "fd00:198:19::9")
) -> dict[int, set[str]]:
    """The allowed sources (firewall-allow's last field) a dual-stack LoadBalancer compiles to, per family."""
    svc = Service(
        "default", "lb", "LoadBalancer", (IPv4Address("10.96.0.9"), IPv6Address("fd00:10:96::9")),
        (ServicePort("http", "TCP", 80, 30009),), load_balancer_ips=tuple(ip_address(a) for a in lb_ips),
        load_balancer_source_ranges=tuple(ip_network(r) for r in ranges),
    )  # fmt: skip
    out = {}
    for family in Family:
        frag = compile_fragment(svc, [], family, config)
        assert frag is not None
        out[family.version] = {el.key[3] for name, el in frag.elements if name == "firewall-allow"}
    return out


def test_a_range_holding_the_node_ip_allows_the_load_balancer_ips_as_sources() -> None:
    """proxier.go allowFromNode: a range (of the family) holding the proxier's node IP adds the
    Service's LoadBalancer IPs of that family to the allowed sources; each family by its own node
    IP, the first of that family (--node-ip, else the Node's), loopback when there is none."""
    dual = ProxyConfig(node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")))
    ranges = ["198.18.0.0/24", "203.0.113.0/24", "fd00:198:18::100/128"]
    assert _allowed(ranges, dual) == {4: {"198.18.0.0/24", "203.0.113.0/24", "198.19.0.9"}, 6: {"fd00:198:18::100"}}
    assert _allowed(["fd00:198:18::/64"], dual) == {4: set(), 6: {"fd00:198:18::/64", "fd00:198:19::9"}}
    # no IPv6 node IP: ::1, as kube-proxy's detectNodeIPs; a range holding 127.0.0.1 counts without an IPv4 one
    v4_only = ProxyConfig(node_ips=(ip_address("198.18.0.1"),))
    assert _allowed(["fd00:198:18::/64"], v4_only)[6] == {"fd00:198:18::/64"}
    assert _allowed(["0.0.0.0/1"], ProxyConfig())[4] == {"0.0.0.0/1", "198.19.0.9"}
    # a LoadBalancer IP inside a range: one element (the kernel refuses overlapping intervals)
    assert _allowed(["198.0.0.0/8"], dual)[4] == {"198.0.0.0/8"}
    assert _allowed(["198.18.0.0/24"], dual, ("198.18.0.200", "198.19.0.8"))[4] == {"198.18.0.0/24", "198.19.0.8"}


def test_source_ranges_apply_to_a_port_without_endpoints() -> None:
    """proxier.go: the firewall-ips element of a LoadBalancer IP does not depend on endpoints: an
    unlisted source is dropped before it could learn that the port has none (rejected)."""
    svc = Service(
        "default", "lb", "LoadBalancer", (IPv4Address("10.96.0.9"),), (ServicePort("http", "TCP", 80, 30009),),
        load_balancer_ips=(IPv4Address("198.19.0.9"),), load_balancer_source_ranges=(ip_network("203.0.113.0/24"),),
    )  # fmt: skip
    frag = compile_fragment(svc, [], Family.IP, CFG)
    assert frag is not None
    got = {(name, el.key) for name, el in frag.elements if name.startswith("firewall")}
    assert got == {
        ("firewall-ips", ("198.19.0.9", "tcp", "80")),
        ("firewall-allow", ("198.19.0.9", "tcp", "80", "203.0.113.0/24")),
    }
