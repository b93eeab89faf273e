"""--service-counters in the compiled table and read back: the counting sets hold one element
per frontend of every Service port (with endpoints or not), a frontend another Service holds is
not counted twice, the table without the option is the one without counters, and the counts are
summed per Service port and kind of frontend (the real kernel's counts: tests/netns/test_service_counters.py)."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address

from nftproxy.compiler import ProxyConfig, compile_tables, names
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose import counters
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.listing import CountedElement
from nftproxy.nft.objects import Family, Table
from testkit.k8s import objects as k

CFG = ProxyConfig(node_name="n1", node_ips=(ip_address("192.168.1.1"),))
ON = replace(CFG, service_counters=True)
HTTP = [k.port(8080, "http")]


def world() -> tuple[list[Service], list[EndpointSlice]]:
    objs = [
        k.service("web", ["10.96.0.10"], [k.port(80, "http", node_port=30080)], type="NodePort",
                  external_ips=["192.0.2.5"]),
        k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2", node="n1")], HTTP),
        k.service("empty", ["10.96.0.20"], [k.port(53, protocol="UDP")]),
        # claims web's externalIP as its own ClusterIP's port: web loses that frontend
        k.service("owner", ["192.0.2.5"], [k.port(80, "http")]),
        k.endpoint_slice("owner-1", "owner", [k.endpoint("10.244.1.3", node="n1")], HTTP),
    ]  # fmt: skip
    parsed = [k.parsed(o) for o in objs]
    return [p for p in parsed if isinstance(p, Service)], [p for p in parsed if isinstance(p, EndpointSlice)]


def table(config: ProxyConfig) -> Table:
    return compile_tables(*world(), config).tables[0]


def test_counting_sets_hold_every_frontend_with_the_service_port_named() -> None:
    t = table(ON)
    traffic = t.elements[names.SERVICE_TRAFFIC]
    assert {key: el.comment for key, el in traffic.items()} == {
        ("10.96.0.10", "tcp", "80"): "default/web:http",
        ("192.0.2.5", "tcp", "80"): "default/owner:http",  # its own ClusterIP wins: counted once
        ("10.96.0.20", "udp", "53"): "default/empty",  # no endpoints: counted all the same
    }
    assert set(t.elements[names.SERVICE_CONNECTIONS]) == set(traffic)
    assert set(t.elements[names.NODEPORT_TRAFFIC]) == set(t.elements[names.NODEPORT_CONNECTIONS]) == {("tcp", "30080")}
    assert all(t.sets[n].counter for n in (*names.TRAFFIC_SETS, *names.COUNTED_MAPS))
    assert "counter;" in t.sets[names.NO_ENDPOINT_SERVICES].declaration()
    assert t.chains[names.COUNT_PREROUTING].hook is not None and t.chains[names.COUNT_OUTPUT].hook is not None


def test_without_the_option_the_table_has_no_counter_and_another_comment() -> None:
    off, on = table(CFG), table(ON)
    assert not set(names.TRAFFIC_SETS) & set(off.sets)
    assert not any(s.counter for s in off.sets.values())
    assert not any(n.startswith("count") or n == names.SERVICE_COUNTERS for n in off.chains)
    assert off.comment != on.comment  # never adopted for one another: a toggle replaces the table
    assert {n: s for n, s in on.sets.items() if n not in names.TRAFFIC_SETS} != off.sets  # counted maps


def test_partial_syncs_keep_the_counting_elements_in_step() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, ON)
    services, slices = world()
    for s in services:
        dp.inputs.set_service(s)
    for sl in slices:
        dp.inputs.set_slice(sl)
    assert dp.sync().full
    dp.inputs.delete_service("default/empty")
    assert not dp.sync().full
    t = fake.tables[(Family.IP, "nftproxy")]
    assert ("10.96.0.20", "udp", "53") not in t.elements[names.SERVICE_TRAFFIC]
    read = counters.read(fake, Family.IP, "nftproxy")
    assert {(p.service, p.kind) for p in read} == {("web", "ClusterIP"), ("web", "NodePort"), ("owner", "ClusterIP")}


def el(
    key: tuple[str, ...], packets: int, size: int = 0, comment: str | None = None, value: str | None = None
) -> CountedElement:
    return CountedElement(key, packets, size, comment, (value,) if value else None)


def test_counts_are_summed_per_service_port_and_kind() -> None:
    listed = {
        names.CLUSTER_IPS: [el(("10.96.0.10",), 0)],
        names.SERVICE_TRAFFIC: [
            el(("10.96.0.10", "tcp", "80"), 10, 1000, "ns/web:http"),
            el(("192.0.2.5", "tcp", "80"), 4, 400, "ns/web:http"),
            el(("192.0.2.6", "tcp", "80"), 6, 600, "ns/web:http"),  # externals: summed
        ],
        names.SERVICE_CONNECTIONS: [el(("10.96.0.10", "tcp", "80"), 2), el(("192.0.2.6", "tcp", "80"), 1)],
        names.NODEPORT_TRAFFIC: [el(("udp", "30053"), 3, 90, "ns/dns")],
        names.NODEPORT_CONNECTIONS: [el(("udp", "30053"), 3)],
        names.NO_ENDPOINT_SERVICES: [el(("10.96.0.11", "tcp", "80"), 7, 420, "ns/gone:web", "drop")],
    }
    got = counters.tally(listed)
    cluster = got[counters.PortKey("ns", "web", "http", "TCP", "ClusterIP")]
    external = got[counters.PortKey("ns", "web", "http", "TCP", "External")]
    nodeport = got[counters.PortKey("ns", "dns", "", "UDP", "NodePort")]
    dropped = got[counters.PortKey("ns", "gone", "web", "TCP", "External")]
    assert (cluster.packets, cluster.bytes, cluster.connections) == (10, 1000, 2)
    assert (external.packets, external.bytes, external.connections) == (10, 1000, 1)
    assert (nodeport.packets, nodeport.connections) == (3, 3)
    assert (dropped.dropped, dropped.rejected, dropped.refusing) == (7, 0, counters.DROP)
    assert counters.describe(cluster) == "2 connections, 10 packets, 1.0 KB"
    assert counters.describe(dropped) == "0 connections, 0 packets, 0 B; 7 dropped (no endpoints)"
