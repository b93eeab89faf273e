"""The traffic-policy cases of the kernel tests, on the packet tracer (tests/support/tracer.py):
no root, no kernel, milliseconds.

Each test names the kernel test it mirrors (tests/netns/test_traffic_policies.py,
tests/netns/test_packet_flows.py, tests/netns/test_source_ranges.py) and asks what that test asks,
of the same objects compiled for the same nodes (tests/support/policy_lab.py): which pods answer,
"refused" (rejected) or "timeout" (dropped), and whether the client's source is kept. A tracer
case complements its kernel test, it does not replace it: tests/netns/test_tracer_crosscheck.py
checks on the kernel that the tracer's answers are the kernel's.
"""

from __future__ import annotations

import functools

import pytest

from nftproxy.compiler import names, skeleton
from nftproxy.nft.objects import Chain, Family, Table
from testkit.k8s import objects as k
from tests.support.policy_lab import (
    HostLike,
    TracerLab,
    flow_flags,
    flow_objects,
    lab_client,
    lab_node,
    lab_pod,
    node_table_tracer,
    policy_flags,
    policy_objects,
)
from tests.support.tracer import Packet, Tracer, Unsupported

# test_traffic_policies' lab: node1 (zone-a) a1 a2, node2 (zone-b) b1 b2, clients ext, ext2 via node1
N1, N2 = lab_node(1), lab_node(2)
A1, A2, B1, B2 = lab_pod(N1, "a1", 1), lab_pod(N1, "a2", 2), lab_pod(N2, "b1", 1), lab_pod(N2, "b2", 2)
EXT, EXT2 = lab_client("ext", 100), lab_client("ext2", 101)
# test_packet_flows' lab: node1 a b t1 t2, node2 c
A, B, T1, T2 = (lab_pod(N1, n, i) for i, n in enumerate(("a", "b", "t1", "t2"), 1))
C = lab_pod(N2, "c", 1)


@functools.cache
def two() -> TracerLab:
    return TracerLab([N1, N2], [A1, A2, B1, B2], policy_objects(N1, N2, A1, A2, B1, B2), policy_flags)


@functools.cache
def flows() -> TracerLab:
    return TracerLab([N1, N2], [A, B, C, T1, T2], flow_objects(A, B, C, T1, T2), flow_flags)


# -- tests/netns/test_traffic_policies.py ------------------------------------------------------


def test_etp_local_external_traffic_goes_to_local_endpoints_with_client_source() -> None:
    t = two()
    assert t.pods(EXT, "198.19.3.10", 80) == {"a1"}
    assert not t.masq(EXT, "198.19.3.10", 80)
    assert t.pods(EXT, N1.ipv4, 30310) == {"a1"}
    assert t.pods(EXT, N2.ipv4, 30310) == {"b1", "b2"}
    assert not t.masq(EXT, N2.ipv4, 30310)


def test_etp_local_without_local_endpoints_drops() -> None:
    t = two()
    assert t.pods(EXT, N1.ipv4, 30311) == {"timeout"}
    assert t.trace(EXT, N1.ipv4, 30311).output == "DROP"  # dropped, not rejected
    assert t.pods(EXT, N2.ipv4, 30311) == {"b1"}


def test_etp_local_pod_and_node_traffic_short_circuits_to_all_endpoints() -> None:
    t = two()
    assert t.pods(A2, "198.19.3.10", 80) == {"a1", "b1", "b2"}
    assert not t.masq(A2, "198.19.3.10", 80)  # pod traffic: source kept
    assert t.pods(A2, N1.ipv4, 30311) == {"b1"}
    assert t.pods(N1, N1.ipv4, 30311) == {"b1"}
    assert t.masq(N1, N1.ipv4, 30311)  # the node's own traffic is masqueraded


def test_cluster_ip_of_etp_local_service_uses_all_endpoints() -> None:
    assert two().pods(A2, "10.96.3.10", 80) == {"a1", "b1", "b2"}


def test_itp_local() -> None:
    t = two()
    assert t.pods(A2, "10.96.3.12", 80) == {"a1", "a2"}
    assert t.pods(B2, "10.96.3.12", 80) == {"b1"}
    assert t.trace(A1, "10.96.3.13", 80).output == "DROP"  # endpoints exist, none on node1
    assert t.pods(B2, "10.96.3.13", 80) == {"b1"}


def test_topology_zone_hints() -> None:
    t = two()
    assert t.pods(A2, "10.96.3.14", 80) == {"a1"}
    assert t.pods(B2, "10.96.3.14", 80) == {"b1", "b2"}
    assert t.pods(A2, "10.96.3.15", 80) == {"a1", "b1"}


def test_topology_same_node_hints() -> None:
    t = two()
    assert t.pods(B2, "10.96.3.16", 80) == {"b1"}
    assert t.pods(A1, "10.96.3.16", 80) == {"a1", "a2"}


def test_load_balancer_source_ranges() -> None:
    t = two()
    assert t.pods(EXT, "198.19.3.17", 80) == {"a1"}
    assert t.trace(EXT2, "198.19.3.17", 80).output == "DROP"  # not in the ranges: dropped
    assert t.pods(EXT2, N1.ipv4, 30317) == {"a1"}  # NodePorts are not filtered (upstream)
    # a source inside the other range (192.0.2.0/24), seen at node1 as the kernel would see it
    tracer = t.tracers[("node1", Family.IP)]
    assert tracer.trace(Packet("192.0.2.77", "198.19.3.17", 80)).output == f"{A1.ipv4}:8080"
    assert tracer.trace(Packet("192.0.3.1", "198.19.3.17", 80)).output == "DROP"


def test_local_policies_fall_back_to_serving_terminating_local_endpoints() -> None:
    t = two()
    assert t.pods(EXT, N1.ipv4, 30318) == {"a2"}
    assert t.pods(A1, "10.96.3.18", 80) == {"a2"}
    assert t.pods(EXT, N2.ipv4, 30318) == {"b1"}


# -- tests/netns/test_packet_flows.py (FLOWS, hairpin) ------------------------------------------

# test_flow's cases: source, proto, destination, port -> pods | "refused" | "timeout", masquerade
FLOWS = [
    ("c", "tcp", "10.96.0.10", 80, {"a", "b"}, False),  # ClusterIP from a pod on another node
    ("node1", "tcp", "10.96.0.10", 80, {"a", "b"}, True),  # from the node: off-cluster source
    ("ext", "tcp", "198.18.0.1", 30080, {"a", "b"}, True),  # NodePort on the node IP, eTP Cluster
    ("ext", "tcp", "198.19.0.10", 80, {"a", "b"}, True),  # LoadBalancer IP
    ("ext", "tcp", "198.19.0.20", 80, {"a", "b"}, True),  # externalIP
    ("a", "udp", "10.96.0.53", 53, {"c"}, False),
    ("a", "tcp", "10.96.0.20", 80, {"refused"}, None),  # no endpoints: rejected
    ("node1", "tcp", "10.96.0.20", 80, {"refused"}, None),
    ("ext", "tcp", "198.18.0.1", 30090, {"refused"}, None),
    ("a", "tcp", "10.96.0.10", 81, {"refused"}, None),  # a ClusterIP port no Service serves
    ("a", "tcp", "10.96.0.30", 80, {"t1"}, False),  # terminating fallback
    ("a", "tcp", "10.96.0.31", 80, {"t2"}, False),  # a ready endpoint beats a terminating one
    ("c", "tcp", "fd00:10:96::10", 80, {"a", "b"}, False),
    ("ext", "tcp", "fd00:198:18::1", 30080, {"a", "b"}, True),
    ("ext", "tcp", "fd00:198:19::10", 80, {"a", "b"}, True),
    ("a", "tcp", "10.96.0.40", 80, {"timeout"}, None),  # another proxy's Service: not ours
]
FLOW_HOSTS: dict[str, HostLike] = {"a": A, "b": B, "c": C, "node1": N1, "node2": N2, "ext": EXT}


@pytest.mark.parametrize(("source", "proto", "dest", "port", "expect", "masq"), FLOWS)
def test_flow(source: str, proto: str, dest: str, port: int, expect: set[str], masq: bool | None) -> None:
    t = flows()
    src = FLOW_HOSTS[source]
    assert t.pods(src, dest, port, proto) == expect, t.trace(src, dest, port, proto).describe()
    if masq is not None:
        assert t.masq(src, dest, port, proto) is masq


def test_hairpin_is_masqueraded_other_pod_traffic_is_not() -> None:
    trace = flows().trace(A, "10.96.0.10", 80)
    by_target = {o.target: o.masqueraded for o in trace.outcomes}
    assert by_target == {f"{A.ipv4}:8080": True, f"{B.ipv4}:8080": False}


def test_masquerade_all() -> None:
    plain = flows()
    assert not plain.masq(C, "10.96.0.10", 80)
    every = TracerLab([N2], [A, B, C], flow_objects(A, B, C, T1, T2), lambda n: [*flow_flags(n), "--masquerade-all"])
    assert every.pods(C, "10.96.0.10", 80) == {"a", "b"} and every.masq(C, "10.96.0.10", 80)


def test_nodeport_addresses_limit_where_nodeports_answer() -> None:
    limited = TracerLab(
        [N1],
        [A, B],
        flow_objects(A, B, C, T1, T2),
        lambda n: [*flow_flags(n), "--nodeport-addresses", "198.19.99.0/24,fd00:198:18::/64"],
    )
    trace = limited.trace(EXT, N1.ipv4, 30080)
    assert [(o.target, o.delivered) for o in trace.outcomes] == [("ACCEPT", "local")]  # the node's own stack
    assert limited.pods(EXT, N1.ipv4, 30080) == {"refused"}  # nothing listens there
    assert limited.pods(EXT, N1.ipv6, 30080) == {"a", "b"}
    assert flows().pods(EXT, N1.ipv4, 30080) == {"a", "b"}
    # a family without a CIDR answers on all its addresses (kube-proxy's NodePortAddresses)
    v6_only = TracerLab(
        [N1],
        [A, B],
        flow_objects(A, B, C, T1, T2),
        lambda n: [*flow_flags(n), "--nodeport-addresses", "fd00:198:18::/64"],
    )
    assert v6_only.pods(EXT, N1.ipv4, 30080) == {"a", "b"}


def test_unknown_port_from_the_node_is_rejected_after_dnat() -> None:
    """The node's own packet to a ClusterIP port no Service serves is rejected, after nat-output
    (filter-output-post-dnat, as kube-proxy v1.37's filter-output at priority 0); a served port
    is DNATed first and passes (tests/conformance service-cidr-unallocated, from the node)."""
    out = flows().trace(N1, "10.96.0.10", 81).outcomes
    assert [(o.verdict, o.dnat) for o in out] == [("reject", None)]
    assert flows().pods(N1, "10.96.0.10", 80) == {"a", "b"}


# -- tests/netns/test_source_ranges.py (test_host_prefix_ranges_let_only_that_client_in) ----------


def test_source_ranges_ipv6() -> None:
    svc = k.service(
        "fw6", ["10.96.5.1", "fd00:10:96::5:1"], [k.port(80, "http")], type="LoadBalancer",
        lb_ips=["198.19.5.1", "fd00:198:19::5:1"], ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack",
        loadBalancerSourceRanges=["198.18.0.100/32", "fd00:198:18::100/128", "fd00:198:18:1::/64"],
    )  # fmt: skip
    slices = [
        k.endpoint_slice("fw6-4", "fw6", [k.endpoint(A.ipv4, node="node1")], [k.port(8080, "http")]),
        k.endpoint_slice(
            "fw6-6", "fw6", [k.endpoint(A.ipv6, node="node1")], [k.port(8080, "http")], address_type="IPv6"
        ),
    ]
    t = TracerLab([N1], [A], [svc, *slices], flow_flags)
    assert t.pods(EXT, "fd00:198:19::5:1", 80) == {"a"}  # fd00:198:18::100 is listed
    assert t.pods(EXT2, "fd00:198:19::5:1", 80) == {"timeout"}  # ::101 is not
    six = t.tracers[("node1", Family.IP6)]
    assert six.trace(Packet("fd00:198:18:1::7", "fd00:198:19::5:1", 80)).output == f"[{A.ipv6}]:8080"
    assert six.trace(Packet("fd00:198:18:2::7", "fd00:198:19::5:1", 80)).output == "DROP"
    assert t.pods(EXT, "198.19.5.1", 80) == {"a"} and t.pods(EXT2, "198.19.5.1", 80) == {"timeout"}


# -- tests/netns/test_firewall_and_nodeport_rejects.py ------------------------------------------


def _lb_node_tracer(ranges: list[str], endpoints: bool = True, held: tuple[str, ...] = ()) -> Tracer:
    """node1's IPv4 tracer for one LoadBalancer 198.19.6.1 with these ranges; ``held``: addresses
    the node holds besides its own (a VIP)."""
    svc = k.service(
        "fw", ["10.96.6.1"], [k.port(80, "http")], type="LoadBalancer", lb_ips=["198.19.6.1"],
        loadBalancerSourceRanges=ranges,
    )  # fmt: skip
    eps = [k.endpoint(A.ipv4, node="node1")] if endpoints else []
    table = node_table_tracer([svc, k.endpoint_slice("fw-1", "fw", eps, [k.port(8080, "http")])], flow_flags(N1)).table
    return Tracer(table, [N1.ipv4, *held])


def test_a_node_holding_the_vip_connects_from_it_when_a_range_holds_the_nodes_ip() -> None:
    from_vip = Packet("198.19.6.1", "198.19.6.1", 80, local=True)  # the node holding the VIP, to it
    assert _lb_node_tracer(["198.18.0.0/24"], held=("198.19.6.1",)).trace(from_vip).output == f"{A.ipv4}:8080"
    assert _lb_node_tracer(["198.18.0.100/32"], held=("198.19.6.1",)).trace(from_vip).output == "DROP"
    # a packet from outside with the VIP as its source passes too, as kube-proxy's rule lets it
    assert _lb_node_tracer(["198.18.0.1/32"]).trace(Packet("198.19.6.1", "198.19.6.1", 80)).output == f"{A.ipv4}:8080"


def test_source_ranges_drop_unlisted_sources_of_a_port_without_endpoints() -> None:
    t = _lb_node_tracer(["198.18.0.100/32"], endpoints=False)
    assert t.trace(Packet(EXT.ipv4, "198.19.6.1", 80)).output == "REJECT"  # listed: no endpoints, refused
    assert t.trace(Packet(EXT2.ipv4, "198.19.6.1", 80)).output == "DROP"  # not listed: dropped first
    assert t.trace(Packet(N1.ipv4, "198.19.6.1", 80, local=True)).output == "DROP"  # the node too


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_the_nodes_own_nodeport_without_endpoints_is_rejected_on_the_way_in(proto: str) -> None:
    svc = k.service("np", ["10.96.6.2"], [k.port(80, "http", proto.upper(), node_port=30602)], type="NodePort")
    sl = k.endpoint_slice("np-1", "np", [], [k.port(8080, "http", proto.upper())])
    t = node_table_tracer([svc, sl], flow_flags(N1))
    [out] = t.trace(Packet(N1.ipv4, N1.ipv4, 30602, proto, local=True)).outcomes
    assert out.verdict == "reject" and out.path[-1] == "filter-input: reject"  # not in filter-output


# -- the tracer itself ----------------------------------------------------------------------------


def _table(objs: list[k.Obj], *flags: str) -> Table:
    return node_table_tracer(objs, ["--node-name", "node1", "--node-ip", N1.ipv4, *flags]).table


def test_every_rule_our_compiler_can_write_is_understood() -> None:
    """Every per-count template of every kind and algorithm (what the table comment digests),
    under each masquerade setting (compiler/render.py: each local-traffic detector), with and
    without the detector's Local-policy short-circuit, with and
    without the localhost NodePort checks (--nodeport-addresses localhost): the tracer
    parses all of it (it raises on the first rule it does not understand)."""
    for family in Family:
        for masquerade in (
            None,
            "jump mark-for-masquerade",
            f"{family.value} saddr != @cluster-cidrs jump mark-for-masquerade",
            f"{family.value} saddr != @node-pod-cidrs jump mark-for-masquerade",
            'iifname != "cbr0" jump mark-for-masquerade',
            'iifname != "veth*" jump mark-for-masquerade',
        ):
            pod_set = names.NODE_POD_CIDRS if "node-pod-cidrs" in (masquerade or "") else names.CLUSTER_CIDRS
            local = masquerade.split(" jump")[0].replace(" != ", " ") if masquerade and "!=" in masquerade else None
            for pods, rejected in ((False, ()), (True, ()), (True, ("udp", "sctp")), (True, ("tcp", "udp", "sctp"))):
                sets = {s.name: s for s in skeleton.base_sets(family, rejected, pod_set=pod_set)}
                chains = {c.name: c for c in skeleton.base_chains(family, rejected)}
                counters = {c.name: c for c in skeleton.base_counters(rejected)}
                kinds = [
                    (kind, n)
                    for kind in skeleton.KINDS
                    for n in (0, 1, 3)
                    if n or kind.startswith(("local", "nodeport-"))
                ]
                kinds += [(f"{kind}@sh", 2) for kind in skeleton.KINDS[:4]]
                kinds += [("rr-entry", 0), ("rr:0123456789s", 2), ("rr:0123456789", 3)]
                for kind, n in kinds:
                    ss, cs = skeleton.count_objects(family, kind, n, masquerade, local if pods else None)
                    sets.update((s.name, s) for s in ss)
                    chains.update((c.name, c) for c in cs)
                tracer = Tracer(Table(family, "t", "", chains, sets, {}, counters=counters), [])
                assert sum(map(len, tracer.chains.values())) == sum(len(c.rules) for c in chains.values())


@pytest.mark.parametrize(
    "rule",
    [
        "ip daddr 10.96.0.1-10.96.0.9 accept",  # a literal range: we never write one
        'counter name "no-such-counter" accept',
        "tcp flags syn counter",
        "ip daddr . meta l4proto . th dport vmap @no-such-map",
        "meta mark set 0x1",
        "ip6 daddr @cluster-ips",  # the other family
        "jump no-such-chain",
        "log prefix x",
    ],
)
def test_a_rule_it_does_not_understand_raises(rule: str) -> None:
    table = _table([])
    services = table.chains["services"]
    broken = {**table.chains, "services": Chain("services", (*services.rules, rule))}
    with pytest.raises(Unsupported):
        Tracer(Table(table.family, table.name, table.comment, broken, table.sets, table.elements), [N1.ipv4])


def test_affinity_is_recorded_and_followed() -> None:
    svc = k.service("sticky", ["10.96.6.1"], [k.port(80, "http")], sessionAffinity="ClientIP")
    eps = k.endpoint_slice("sticky-1", "sticky", [k.endpoint(A.ipv4), k.endpoint(B.ipv4)], [k.port(8080, "http")])
    tracer = Tracer(_table([svc, eps], "--cluster-cidr", "10.244.0.0/16"), [N1.ipv4])
    first = tracer.trace(Packet(C.ipv4, "10.96.6.1", 80))
    assert first.targets == {f"{A.ipv4}:8080", f"{B.ipv4}:8080"} and tracer.affinity == {}
    assert len(first.outcomes) == 2
    # record one outcome as the kernel would (the update in nat-postrouting), then follow it
    (record,) = [name for name, st in tracer.table.sets.items() if st.dynamic]  # the Service port's record
    only_b = Tracer(tracer.table, [N1.ipv4])
    only_b.affinity[record] = {(C.ipv4,): (B.ipv4, "8080")}  # keyed by the client alone (kube-proxy's)
    assert only_b.trace(Packet(C.ipv4, "10.96.6.1", 80)).output == f"{B.ipv4}:8080"
    tracer.trace(Packet(C.ipv4, "10.96.6.1", 80), record=True)
    assert set(tracer.affinity) == {record}
    assert set(tracer.affinity[record].values()) <= {(A.ipv4, "8080"), (B.ipv4, "8080")} and tracer.affinity[record]


@pytest.mark.parametrize("algorithm", ["source-hash", "round-robin"])
def test_other_load_balancing_algorithms_reach_every_endpoint(algorithm: str) -> None:
    svc = k.service("lb", ["10.96.6.2"], [k.port(80, "http", node_port=30602)], type="NodePort")
    eps = k.endpoint_slice(
        "lb-1", "lb", [k.endpoint(A.ipv4, node="node1"), k.endpoint(C.ipv4, node="node2")], [k.port(8080, "http")]
    )
    tracer = Tracer(_table([svc, eps], "--load-balancing", algorithm), [N1.ipv4])
    want = f"{A.ipv4}:8080, {C.ipv4}:8080"
    assert tracer.trace(Packet(C.ipv4, "10.96.6.2", 80)).output == want
    nodeport = tracer.trace(Packet(EXT.ipv4, N1.ipv4, 30602))
    assert nodeport.output == want and nodeport.masq


def test_affinity_is_shared_by_the_frontends_of_a_service_port() -> None:
    """Mirrors tests/netns/test_affinity.py's cross-frontend test: a client that reached an
    endpoint through the ClusterIP goes back to it through the NodePort (one record per port)."""
    svc = k.service(
        "sticky", ["10.96.6.3"], [k.port(80, "http", node_port=30603)], type="NodePort", sessionAffinity="ClientIP"
    )
    eps = k.endpoint_slice("sticky-1", "sticky", [k.endpoint(A.ipv4), k.endpoint(B.ipv4)], [k.port(8080, "http")])
    tracer = Tracer(_table([svc, eps], "--cluster-cidr", "10.244.0.0/16"), [N1.ipv4])
    (record,) = [name for name, st in tracer.table.sets.items() if st.dynamic]
    tracer.affinity[record] = {(C.ipv4,): (A.ipv4, "8080")}  # as the ClusterIP connection recorded it
    assert tracer.trace(Packet(C.ipv4, "10.96.6.3", 80)).output == f"{A.ipv4}:8080"
    assert tracer.trace(Packet(C.ipv4, N1.ipv4, 30603)).output == f"{A.ipv4}:8080"
