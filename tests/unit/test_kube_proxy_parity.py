"""Differences from the real kube-proxy found by tests/conformance, pinned as unit tests.

Each test names the kube-proxy v1.34 behaviour it checks (pkg/proxy/endpointslicecache.go,
topology.go, endpointschangetracker.go) and was seen failing before the fix."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from nftproxy.compiler import ProxyConfig, names
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
    dp.set_service(lb)
    terminating = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n1")
    remote = Endpoint("10.244.2.2", ready=True, serving=True, terminating=False, node_name="n2")
    dp.set_slice(_slice("web-a", terminating, remote))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 0})}
    ready = Endpoint("10.244.1.3", ready=True, serving=True, terminating=False, node_name="n1")
    dp.set_slice(_slice("web-a", terminating, remote, ready))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 1})}


def test_health_check_counts_the_local_endpoints_of_every_slice_port() -> None:
    """endpointschangetracker.go getLocalReadyEndpointIPs counts, per Service, the local ready
    addresses of every port its slices list, also a port no Service port names; and a duplicate's
    copy is the one traffic gets (the differential fuzzer, seed 6: kube-proxy answered
    localEndpoints=2, nftproxy 1, the Service's port having one local endpoint, a port of the
    slices it lacks another)."""
    dp = Dataplane(FakeBackend(), CFG)
    dp.set_service(
        Service(
            "default",
            "web",
            "LoadBalancer",
            (IPv4Address("10.96.0.10"),),
            (ServicePort("http", "TCP", 80, 30080),),
            load_balancer_ips=(IPv4Address("198.19.0.10"),),
            external_traffic_policy="Local",
            health_check_node_port=32000,
        )
    )

    def ep(address: str, node: str = "n1", ready: bool = True) -> Endpoint:
        return Endpoint(address, ready=ready, serving=True, terminating=not ready, node_name=node)

    other = EndpointSlice("default", "web-b", "web", "IPv4", (EndpointPort("old", "UDP", 5353),),
                          (ep("10.244.1.3"), ep("10.244.1.2"), ep("10.244.1.5", ready=False)))  # fmt: skip
    dp.set_slice(_slice("web-a", ep("10.244.1.2"), ep("10.244.2.2", "n2"), ep("10.244.1.4"), ep("10.244.1.4", "n2")))
    dp.set_slice(other)
    dp.sync()
    # 10.244.1.2 (both ports), 10.244.1.3 ("old" only); not 10.244.1.4 (its later copy is on n2)
    assert dp.health_checks() == {32000: ("default/web", {4: 2})}


def test_source_ranges_apply_to_a_port_without_endpoints() -> None:
    """nftables/proxier.go programs a LoadBalancer IP's firewall whether or not the port has
    endpoints: a source outside loadBalancerSourceRanges is dropped, not told there are no
    endpoints (the differential fuzzer, seed 159: nftproxy rejected it)."""
    svc = Service(
        "default",
        "web",
        "LoadBalancer",
        (IPv4Address("10.96.0.10"),),
        (ServicePort("dns", "UDP", 53, 30053),),
        load_balancer_ips=(IPv4Address("198.19.0.10"),),
        load_balancer_source_ranges=(ip_network("198.18.0.100/32"),),
    )
    frag = compile_fragment(svc, [], Family.IP, CFG)
    assert frag is not None
    sets = {name for name, _ in frag.elements}
    assert {names.FIREWALL_IPS, names.FIREWALL_ALLOW, names.NO_ENDPOINT_SERVICES} <= sets


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
    # without a node name: the later slice's copy
    assert targets(PORT, [_slice("a", remote), _slice("b", local)])[0].endpoint.node_name == "n1"


def test_duplicate_endpoint_in_one_slice_as_kube_proxy() -> None:
    """endpointslicecache.go addEndpoints walks one slice in order and a copy replaces an earlier
    one unless it is terminating: the last non-terminating copy, else the first copy, wherever
    its node (the differential fuzzer, seed 109: nftproxy took the copy on this node, counted it
    in the health check and sent eTP Local traffic to it; kube-proxy took the later, remote one)."""
    remote = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n2")
    local = Endpoint("10.244.1.2", ready=True, serving=True, terminating=False, node_name="n1")
    gone_remote = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n2")
    gone_local = Endpoint("10.244.1.2", ready=False, serving=True, terminating=True, node_name="n1")
    for eps, want in (
        ((local, remote), remote),
        ((remote, local), local),
        ((local, remote, gone_local), remote),
        ((gone_local, gone_remote), gone_local),
        ((gone_remote, gone_local), gone_remote),
    ):
        for slices in ([_slice("a", *eps)], [_slice("a", *eps), _slice("b")]):  # one slice, or with another
            got = targets(PORT, slices, "n1")
            assert [t.endpoint for t in got] == [want], eps


def test_dual_stack_health_check_counts_one_family() -> None:
    """kube-proxy's IPv4 and IPv6 proxiers each serve the port on their own family's addresses
    and report their own family's local ready endpoints: one local endpoint per family answers
    localEndpoints=1 on each (tests/conformance case dual-stack-lb)."""
    dp = Dataplane(FakeBackend(), CFG)
    dp.set_service(
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
    dp.set_slice(_slice("web-v4", v4))
    dp.set_slice(EndpointSlice("default", "web-v6", "web", "IPv6", (EndpointPort("http", "TCP", 8080),), (v6,)))
    dp.sync()
    assert dp.health_checks() == {32000: ("default/web", {4: 1, 6: 1})}
