"""sessionAffinity ClientIP in the compiled table (issue 22): one record per client and Service
port, shared by every frontend of the port that uses the same endpoint list, on IPv4 and IPv6;
the release of records whose endpoint is gone (fake backend)."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from typing import Any

from nftproxy.compiler import ProxyConfig, compile_tables, names
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify as parse_objects
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import DynamicElement, Family, Table
from testkit.k8s import objects as k

CFG = ProxyConfig(
    node_name="node1",
    node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
    cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
)
STICKY = {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}
HTTP = [{"name": "http", "port": 8080, "protocol": "TCP"}]
TAG = names.port_tag("default/web", "http", "tcp")


def objects(**spec: Any) -> list[k.Obj]:
    svc = k.service("web", ["10.96.0.10", "fd00:10:96::10"], [k.port(80, "http", node_port=30080)], type="NodePort",
                    external_ips=["198.19.0.10", "fd00:198:19::10"], **{**STICKY, **spec})  # fmt: skip
    eps4 = [k.endpoint("10.244.1.2", node="node1"), k.endpoint("10.244.2.2", node="node2")]
    eps6 = [k.endpoint("fd00:10:244:1::2", node="node1"), k.endpoint("fd00:10:244:2::2", node="node2")]
    return [
        svc,
        k.endpoint_slice("web-4", "web", eps4, HTTP),
        k.endpoint_slice("web-6", "web", eps6, HTTP, address_type="IPv6"),
    ]


def tables(objs: list[k.Obj]) -> dict[Family, Table]:
    inputs = parse_objects(objs)
    desired = compile_tables(inputs.services, inputs.slices, CFG)
    assert not desired.skipped, desired.skipped  # no IPv6 warning any more
    return {t.family: t for t in desired.tables}


def values(t: Table, set_name: str) -> dict[tuple[str, ...], tuple[str, ...] | None]:
    return {key: el.value for key, el in t.elements.get(set_name, {}).items()}


def test_every_frontend_of_a_port_shares_one_record() -> None:
    for family, t in tables(objects()).items():
        ip = "10.96.0.10" if family is Family.IP else "fd00:10:96::10"
        ext = "198.19.0.10" if family is Family.IP else "fd00:198:19::10"
        record = f"goto {names.affinity_record_chain(TAG, 60)}"
        lookup = f"jump {names.sticky_chain(TAG, 60)}"
        assert values(t, names.AFFINITY_SERVICES) == {(ip, "tcp", "80"): (record,), (ext, "tcp", "80"): (record,)}
        assert values(t, names.AFFINITY_NODEPORTS) == {("tcp", "30080"): (record,)}
        assert values(t, names.STICKY_SERVICES) == {(ip, "tcp", "80"): (lookup,), (ext, "tcp", "80"): (lookup,)}
        assert values(t, names.STICKY_NODEPORTS) == {("tcp", "30080"): (lookup,)}
        dynamic = sorted(n for n, s in t.sets.items() if s.dynamic)
        want = [names.affinity_map(TAG, 60)]
        if family is Family.IP6:
            want.append(names.affinity_port_map(TAG, 60))
        assert dynamic == sorted(want) and all(names.is_affinity_map(n) for n in dynamic)


def test_the_record_is_keyed_by_the_client_alone() -> None:
    t = tables(objects())
    v4 = t[Family.IP].sets[names.affinity_map(TAG, 60)]
    assert v4.spec == "typeof ip saddr : ip daddr . th dport" and v4.timeout == "60s"
    assert t[Family.IP].chains[names.sticky_chain(TAG, 60)].rules == (
        f"meta l4proto {{ tcp, udp, sctp }} dnat ip to ip saddr map @{names.affinity_map(TAG, 60)}",
    )
    # IPv6: nft 1.0.6 aborts on `update` with data ipv6_addr . inet_service: address and port apart
    assert t[Family.IP6].sets[names.affinity_map(TAG, 60)].spec == "typeof ip6 saddr : ip6 daddr"
    assert t[Family.IP6].sets[names.affinity_port_map(TAG, 60)].spec == "typeof ip6 saddr : th dport"
    for rule in t[Family.IP6].chains[names.affinity_record_chain(TAG, 60)].rules:
        assert "ip6 daddr . " not in rule, rule


def test_local_policy_frontends_share_a_record_of_their_own() -> None:
    t = tables(objects(externalTrafficPolicy="Local"))[Family.IP]
    local = f"goto {names.affinity_record_chain(TAG + 'l', 60)}"
    assert values(t, names.AFFINITY_SERVICES) == {
        ("10.96.0.10", "tcp", "80"): (f"goto {names.affinity_record_chain(TAG, 60)}",),
        ("198.19.0.10", "tcp", "80"): (local,),
    }
    assert values(t, names.AFFINITY_NODEPORTS) == {("tcp", "30080"): (local,)}


def test_no_affinity_no_objects() -> None:
    t = tables(objects(sessionAffinity="None"))[Family.IP]
    assert not any(s.dynamic for s in t.sets.values())
    assert not values(t, names.STICKY_SERVICES) and not values(t, names.AFFINITY_SERVICES)


def _dataplane(objs: list[k.Obj]) -> Dataplane:
    dp = Dataplane(FakeBackend(), CFG)
    inputs = parse_objects(objs)
    for s in inputs.services:
        dp.inputs.set_service(s)
    for sl in inputs.slices:
        dp.inputs.set_slice(sl)
    dp.sync()
    return dp


def test_a_record_of_a_removed_endpoint_is_released_and_only_that() -> None:
    dp = _dataplane(objects())
    fake = dp.backend
    assert isinstance(fake, FakeBackend)
    m4, m6, p6 = names.affinity_map(TAG, 60), names.affinity_map(TAG, 60), names.affinity_port_map(TAG, 60)
    fake.packet_path_writes(Family.IP, "nftproxy", m4, DynamicElement(("10.244.0.7",), ("10.244.2.2", "8080"), 60))
    fake.packet_path_writes(Family.IP, "nftproxy", m4, DynamicElement(("10.244.0.8",), ("10.244.1.2", "8080"), 60))
    fake.packet_path_writes(Family.IP6, "nftproxy", m6, DynamicElement(("fd00::7",), ("fd00:10:244:2::2",), 60))
    fake.packet_path_writes(Family.IP6, "nftproxy", p6, DynamicElement(("fd00::7",), ("8080",), 60))
    dp.sync()  # nothing changed: every record stays
    assert len(fake.read_dynamic(Family.IP, "nftproxy", m4)) == 2
    objs = objects()
    objs[1] = k.endpoint_slice("web-4", "web", [k.endpoint("10.244.1.2", node="node1")], HTTP)
    objs[2] = k.endpoint_slice("web-6", "web", [k.endpoint("fd00:10:244:1::2", node="node1")], HTTP,
                               address_type="IPv6")  # fmt: skip
    inputs = parse_objects(objs)
    for sl in inputs.slices:
        dp.inputs.set_slice(sl)
    dp.sync()
    assert [e.key for e in fake.read_dynamic(Family.IP, "nftproxy", m4)] == [("10.244.0.8",)]
    assert fake.read_dynamic(Family.IP6, "nftproxy", m6) == []
    assert fake.read_dynamic(Family.IP6, "nftproxy", p6) == []  # the port went with the address
