"""`nftproxy list` over a table the dataplane programmed into the fake backend and read back as
the kernel's is (``read_view``): one row per frontend, its backends and its policy.

The same command against the real kernel: tests/netns/test_service_list.py.
"""

from __future__ import annotations

import dataclasses
import json
from ipaddress import ip_address, ip_network
from typing import Any

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.services import Backend, Listing, Row, listing, render_text
from nftproxy.diagnose.tableview import read_view
from nftproxy.model.manifests import classify
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k

CONFIG = ProxyConfig(
    node_name="node-1",
    node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
    cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
)
HTTP = [k.port(8080, "http")]


def _eps(name: str, *addresses: tuple[str, str], address_type: str = "IPv4") -> k.Obj:
    """A slice of Service ``name`` with endpoints (address, node)."""
    return k.endpoint_slice(f"{name}-{address_type}", name, [k.endpoint(a, node=n) for a, n in addresses], HTTP,
                            address_type=address_type)  # fmt: skip


def programmed(*objs: k.Obj) -> Listing:
    """``objs`` synced by the dataplane into a fake kernel, then listed from what it holds."""
    inputs = classify(objs)
    fake = FakeBackend()
    dp = Dataplane(fake, CONFIG)
    for svc in inputs.services:
        dp.inputs.set_service(svc)
    for sl in inputs.slices:
        dp.inputs.set_slice(sl)
    dp.sync()
    return listing([read_view(fake, f, "nftproxy") for f in Family])


def rows_of(result: Listing, service: str) -> dict[tuple[str, str], Row]:
    """(family, type) -> row, for one Service (each test's Services have one port)."""
    found = {(r.family, r.type): r for r in result.frontends if r.service == service}
    assert len(found) == len([r for r in result.frontends if r.service == service]), result.frontends
    return found


def addrs(backends: tuple[Backend, ...]) -> list[str]:
    return [b.label for b in backends]


def test_cluster_ip_lists_its_endpoints_and_nothing_else() -> None:
    result = programmed(
        k.service("web", ["10.96.0.10"], [k.port(80, "http")]),
        _eps("web", ("10.244.1.2", "node-1"), ("10.244.2.2", "node-2")),
    )
    (row,) = result.frontends
    assert (row.service, row.port_name, row.family, row.type) == ("default/web", "http", "ip", "ClusterIP")
    assert (row.address, row.port, row.protocol, row.frontend) == ("10.96.0.10", 80, "TCP", "10.96.0.10:80/TCP")
    assert addrs(row.backends) == ["10.244.1.2:8080", "10.244.2.2:8080"]
    assert all(b.slots == 1 for b in row.backends)
    assert (row.state, row.traffic_policy, row.load_balancing) == ("active", "Cluster", "random")
    assert (row.session_affinity_timeout, row.source_ranges, row.short_circuit_backends) == (None, (), ())
    assert result.tables == ("ip nftproxy", "ip6 nftproxy")


def test_node_port_answers_on_the_nodeport_addresses() -> None:
    result = programmed(
        k.service("np", ["10.96.0.11"], [k.port(80, "http", node_port=30080)], type="NodePort"),
        _eps("np", ("10.244.1.2", "node-1")),
    )
    rows = rows_of(result, "default/np")
    assert set(rows) == {("ip", "ClusterIP"), ("ip", "NodePort")}
    np = rows[("ip", "NodePort")]
    assert (np.address, np.port, np.frontend, np.state) == (None, 30080, "0.0.0.0:30080/TCP", "active")
    assert addrs(np.backends) == ["10.244.1.2:8080"]
    assert np.load_balancing is None  # one endpoint: nothing is chosen, no algorithm in the table
    assert result.nodeport_addresses["ip"] == ("198.18.0.1",)
    assert "NodePorts (0.0.0.0) answer on: 198.18.0.1" in render_text(result)


def test_external_ip_and_load_balancer_with_source_ranges() -> None:
    result = programmed(
        k.service("ext", ["10.96.0.12"], [k.port(80, "http")], external_ips=["198.19.0.12"]),
        _eps("ext", ("10.244.1.2", "node-1")),
        k.service("lb", ["10.96.0.13"], [k.port(443, "https", node_port=30443)], type="LoadBalancer",
                  lb_ips=["198.19.0.13"], loadBalancerSourceRanges=["203.0.113.0/24", "192.0.2.7/32"]),
        k.endpoint_slice("lb-1", "lb", [k.endpoint("10.244.1.3", node="node-1")], [k.port(8443, "https")]),
    )  # fmt: skip
    ext = rows_of(result, "default/ext")
    assert ext[("ip", "External")].frontend == "198.19.0.12:80/TCP"
    assert ext[("ip", "External")].source_ranges == ()
    lb = rows_of(result, "default/lb")
    assert set(lb) == {("ip", "ClusterIP"), ("ip", "LoadBalancer"), ("ip", "NodePort")}
    row = lb[("ip", "LoadBalancer")]
    assert row.frontend == "198.19.0.13:443/TCP" and addrs(row.backends) == ["10.244.1.3:8443"]
    assert row.source_ranges == ("192.0.2.7", "203.0.113.0/24")
    assert lb[("ip", "NodePort")].source_ranges == ()  # ranges judge LoadBalancer IPs only
    assert "ranges=192.0.2.7,203.0.113.0/24" in render_text(result)


def test_external_traffic_policy_local_lists_this_nodes_endpoints_and_the_short_circuit() -> None:
    result = programmed(
        k.service("local", ["10.96.0.14"], [k.port(80, "http", node_port=30014)], type="LoadBalancer",
                  lb_ips=["198.19.0.14"], externalTrafficPolicy="Local"),
        _eps("local", ("10.244.1.2", "node-1"), ("10.244.2.2", "node-2"), ("10.244.2.3", "node-2")),
        k.service("away", ["10.96.0.15"], [k.port(80, "http", node_port=30015)], type="NodePort",
                  externalTrafficPolicy="Local"),
        _eps("away", ("10.244.2.4", "node-2")),
    )  # fmt: skip
    rows = rows_of(result, "default/local")
    everyone = ["10.244.1.2:8080", "10.244.2.2:8080", "10.244.2.3:8080"]
    for kind in ("External", "NodePort"):
        row = rows[("ip", kind)]
        assert (row.traffic_policy, row.state) == ("Local", "active"), row
        assert addrs(row.backends) == ["10.244.1.2:8080"]
        assert addrs(row.short_circuit_backends) == everyone
        assert row.load_balancing == "random"  # the list of all three is chosen from at random
    cluster = rows[("ip", "ClusterIP")]  # eTP does not apply to the ClusterIP
    assert (cluster.traffic_policy, addrs(cluster.backends)) == ("Cluster", everyone)
    assert cluster.short_circuit_backends == ()
    away = rows_of(result, "default/away")[("ip", "NodePort")]  # endpoints, none on this node
    assert (away.state, away.traffic_policy, away.backends) == ("no-local-endpoints", "Local", ())
    assert addrs(away.short_circuit_backends) == ["10.244.2.4:8080"]
    assert "(none on this node: dropped); from pods and this node: 10.244.2.4:8080" in render_text(result)


def test_internal_traffic_policy_local() -> None:
    result = programmed(
        k.service("here", ["10.96.0.16"], [k.port(80, "http")], internalTrafficPolicy="Local"),
        _eps("here", ("10.244.1.2", "node-1"), ("10.244.2.2", "node-2")),
        k.service("there", ["10.96.0.17"], [k.port(80, "http")], internalTrafficPolicy="Local"),
        _eps("there", ("10.244.2.3", "node-2")),
    )
    here = rows_of(result, "default/here")[("ip", "ClusterIP")]
    assert (here.traffic_policy, here.state, addrs(here.backends)) == ("Local", "active", ["10.244.1.2:8080"])
    there = rows_of(result, "default/there")[("ip", "ClusterIP")]
    assert (there.traffic_policy, there.state, there.backends) == ("Local", "no-local-endpoints", ())
    assert "iTP=Local" in render_text(result)


def test_session_affinity_and_load_balancing_annotations() -> None:
    sticky: dict[str, Any] = {
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
    }
    result = programmed(
        k.service("sticky", ["10.96.0.18"], [k.port(80, "http")], **sticky),
        _eps("sticky", ("10.244.1.2", "node-1"), ("10.244.1.3", "node-1")),
        k.service("sh", ["10.96.0.19"], [k.port(80, "http")],
                  annotations={"nftproxy.io/load-balancing": "source-hash"}),
        _eps("sh", ("10.244.1.4", "node-1"), ("10.244.1.5", "node-1")),
        k.service("rr", ["10.96.0.20"], [k.port(80, "http", node_port=30020)], type="NodePort",
                  annotations={"nftproxy.io/load-balancing": "round-robin"}, internalTrafficPolicy="Local"),
        _eps("rr", ("10.244.1.6", "node-1"), ("10.244.1.7", "node-1"), ("10.244.2.6", "node-2")),
    )  # fmt: skip
    row = rows_of(result, "default/sticky")[("ip", "ClusterIP")]
    assert (row.session_affinity_timeout, row.load_balancing) == (600, "random")
    assert rows_of(result, "default/sh")[("ip", "ClusterIP")].load_balancing == "source-hash"
    rr = rows_of(result, "default/rr")
    # the ClusterIP under iTP Local: round-robin over this node's two; the NodePort (eTP Cluster): all three
    assert (rr[("ip", "ClusterIP")].traffic_policy, addrs(rr[("ip", "ClusterIP")].backends)) == (
        "Local", ["10.244.1.6:8080", "10.244.1.7:8080"])  # fmt: skip
    assert rr[("ip", "NodePort")].traffic_policy == "Cluster"
    assert addrs(rr[("ip", "NodePort")].backends) == ["10.244.1.6:8080", "10.244.1.7:8080", "10.244.2.6:8080"]
    assert {r.load_balancing for r in rr.values()} == {"round-robin"}
    text = render_text(result)
    assert "affinity=600s" in text and "lb=source-hash" in text and "lb=round-robin" in text


def test_round_robin_external_local_without_local_endpoints_is_dropped() -> None:
    result = programmed(
        k.service("rr", ["10.96.0.21"], [k.port(80, "http", node_port=30021)], type="NodePort",
                  annotations={"nftproxy.io/load-balancing": "round-robin"}, externalTrafficPolicy="Local"),
        _eps("rr", ("10.244.2.7", "node-2"), ("10.244.2.8", "node-2")),
    )  # fmt: skip
    np = rows_of(result, "default/rr")[("ip", "NodePort")]
    assert (np.traffic_policy, np.state, np.backends, np.load_balancing) == (
        "Local", "no-local-endpoints", (), "round-robin")  # fmt: skip
    assert addrs(np.short_circuit_backends) == ["10.244.2.7:8080", "10.244.2.8:8080"]


def test_dual_stack_service_has_a_row_per_family() -> None:
    result = programmed(
        k.service("dual", ["10.96.0.22", "fd00:10:96::22"], [k.port(80, "http", node_port=30022)], type="NodePort",
                  ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack"),
        _eps("dual", ("10.244.1.2", "node-1")),
        _eps("dual", ("fd00:10:244:1::2", "node-1"), address_type="IPv6"),
    )  # fmt: skip
    rows = rows_of(result, "default/dual")
    assert set(rows) == {(f, t) for f in ("ip", "ip6") for t in ("ClusterIP", "NodePort")}
    v6 = rows[("ip6", "ClusterIP")]
    assert (v6.frontend, addrs(v6.backends)) == ("[fd00:10:96::22]:80/TCP", ["[fd00:10:244:1::2]:8080"])
    assert rows[("ip6", "NodePort")].frontend == "[::]:30022/TCP"
    assert result.nodeport_addresses["ip6"] == ("fd00:198:18::1",)


def test_service_without_endpoints_is_rejected_on_every_frontend() -> None:
    result = programmed(
        k.service("empty", ["10.96.0.23"], [k.port(53, "dns", "UDP", node_port=30053)], type="NodePort",
                  externalTrafficPolicy="Local"),
    )  # fmt: skip
    rows = rows_of(result, "default/empty")
    assert set(rows) == {("ip", "ClusterIP"), ("ip", "NodePort")}
    for row in rows.values():
        assert (row.state, row.backends, row.traffic_policy, row.protocol) == ("no-endpoints", (), None, "UDP")
    assert "(no endpoints: rejected)" in render_text(result)


def test_json_has_the_documented_keys() -> None:
    result = programmed(
        k.service("web", ["10.96.0.10"], [k.port(80)]),
        k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2")], [k.port(8080)]),
    )
    doc = json.loads(json.dumps(dataclasses.asdict(result)))
    assert set(doc) == {"tables", "nodeport_addresses", "frontends"}
    (row,) = doc["frontends"]
    assert set(row) == {
        "service", "port_name", "family", "type", "address", "port", "protocol", "state", "backends",
        "short_circuit_backends", "traffic_policy", "session_affinity_timeout", "load_balancing", "source_ranges",
    }  # fmt: skip
    assert row["port_name"] == "" and row["backends"] == [{"address": "10.244.1.2", "port": 8080, "slots": 1}]


def test_no_table_lists_nothing() -> None:
    result = listing([None, None])
    assert result.frontends == () and result.tables == ()
    assert render_text(result).startswith("no nftproxy table")


def test_a_name_too_long_for_a_comment_is_shown_shortened() -> None:
    ns, name = "n" * 63, "s" * 63
    result = programmed(
        k.service(name, ["10.96.0.24"], [k.port(80, "http")], namespace=ns),
        k.endpoint_slice("x-1", name, [k.endpoint("10.244.1.2")], HTTP, namespace=ns),
    )
    (row,) = result.frontends
    assert "..." in row.service and f"{ns}/{name}".startswith(row.service.split("...")[0])
    assert (row.port_name, addrs(row.backends)) == ("http", ["10.244.1.2:8080"])
