"""Addresses and CIDRs are read as kube-proxy v1.37.2 reads them, field by field, from the objects
as the API serves them. An apiserver before 1.36 (or with StrictIPCIDRValidation off) stores the
legacy spellings: leading zeros (decimal: ``010.001.002.003`` is 10.1.2.3), IPv4-mapped IPv6
(IPv4 to Kubernetes), CIDRs with host bits set (tests/k8s/test_address_spellings.py creates them on
v1.35.4). A bad item kube-proxy leaves out alone is left out alone, with a warning reported as skips
are; the rest of the object is programmed.

The parsers themselves are checked against the Go code's own answers (tests/golden/
sloppy-reference.json, made by hack/sloppy-reference from k8s.io/utils/net at the version
kubernetes v1.37.2 pins)."""

from __future__ import annotations

import asyncio
import json
from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.compiler.build import Desired
from nftproxy.model.manifests import classify
from nftproxy.model.sloppy import go_parse_ip, go_trim_space, parse_cidr_sloppy, parse_ip_sloppy
from nftproxy.model.types import Node
from testkit.k8s import objects as k
from tests.support.golden import GOLDEN
from tests.support.syncer import make
from tests.support.tracer import Packet, tracers

EXT1, EXT2, FAR = "198.18.0.100", "198.18.0.101", "198.18.1.5"  # clients outside the cluster
NODE = "198.18.0.1"
A1, A2 = "10.244.1.2", "10.244.1.3"
BOTH = {f"{A1}:8080", f"{A2}:8080"}
CONFIG = ProxyConfig(node_name="n1", node_ips=(ip_address(NODE),))


def _compile(*objects: k.Obj) -> tuple[Desired, list[str]]:
    inputs = classify(objects)
    desired = compile_tables(inputs.services, inputs.slices, CONFIG, inputs.ignored)
    return desired, [str(s) for s in (*inputs.skipped, *desired.skipped)]


def _targets(desired: Desired, src: str, dst: str, port: int = 80) -> set[str]:
    family = tracers(desired.tables, [NODE])
    tracer = next(t for f, t in family.items() if f.version == ip_address(dst).version)
    return tracer.trace(Packet(src, dst, port)).targets


def _web(**spec: Any) -> list[k.Obj]:
    """A Service with two endpoints, A1 and A2."""
    svc = k.service("web", ["10.96.0.10"], [k.port(80, node_port=30080)], **spec)
    return [svc, k.endpoint_slice("web-1", "web", [k.endpoint(A1), k.endpoint(A2)], [k.port(8080)])]


# ---- the parsers, against the Go code


def _reference() -> list[dict[str, Any]]:
    return list(json.loads((GOLDEN / "sloppy-reference.json").read_text()))


def test_the_parsers_answer_as_kube_proxys_own_go_code_on_every_reference_text() -> None:
    ref = _reference()
    wrong: list[tuple[str, dict[str, Any], object]] = []
    for a in ref:
        text = a["text"]
        want_ip = None if a["ip"] is None else ip_address(a["ip"])
        want_cidr = None if a["cidr"] is None else ip_network(a["cidr"])
        want_trimmed = None if a["trimmed_cidr"] is None else ip_network(a["trimmed_cidr"])
        got = (parse_ip_sloppy(text), go_parse_ip(text), parse_cidr_sloppy(text))
        if got != (want_ip, want_ip, want_cidr) or parse_cidr_sloppy(go_trim_space(text)) != want_trimmed:
            wrong.append((text, a, got))
        # the family Kubernetes gives it (IPFamilyOf: IPv4-mapped is IPv4) is the one we give it
        if want_ip is not None and str(want_ip.version) != a["family"]:
            wrong.append((text, a, "family"))
        if want_cidr is not None and str(want_cidr.version) != a["cfamily"]:
            wrong.append((text, a, "cidr family"))
    assert not wrong, wrong[:10]
    # a reference that exercises both answers, and the legacy spellings among them
    assert sum(a["ip"] is not None for a in ref) > 200 and sum(a["cidr"] is not None for a in ref) > 200
    by_text = {a["text"]: a for a in ref}
    assert by_text["010.001.002.003"]["ip"] == "10.1.2.3"  # decimal, not octal
    assert by_text["::ffff:1.2.3.4"]["ip"] == "1.2.3.4" and by_text["::ffff:1.2.3.4"]["family"] == "4"
    assert by_text["::ffff:10.0.0.1/104"]["cidr"] == "10.0.0.0/8"
    assert by_text["198.018.000.100/032"]["cidr"] == "198.18.0.100/32"
    assert by_text["fe80::1%eth0"]["ip"] is None and by_text[" 1.2.3.4"]["ip"] is None


# ---- spec.externalIPs


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("198.019.002.010", "198.19.2.10"),  # leading zeros: decimal
        ("::ffff:198.19.2.11", "198.19.2.11"),  # IPv4-mapped: an IPv4 externalIP
        ("::ffff:c613:20c", "198.19.2.12"),  # the same, in hex
    ],
)
def test_an_external_ip_in_a_legacy_spelling_is_served_as_kube_proxy_reads_it(text: str, address: str) -> None:
    desired, skipped = _compile(*_web(externalIPs=[text]))
    assert skipped == []
    assert _targets(desired, EXT1, address) == BOTH
    other = next(t for t in desired.tables if t.family.version != ip_address(address).version)
    assert not any(k[0] not in ("10.96.0.10",) for k in other.elements.get("service-ips", {}))


def test_an_ipv6_external_ip_with_a_five_digit_group_is_served_as_kube_proxy_reads_it() -> None:
    svc = k.service("web", ["10.96.0.10", "fd00:10:96::10"], [k.port(80)], externalIPs=["0fd00:198:19::2:1"])
    eps = [k.endpoint("fd00:10:244:1::2")]
    desired, skipped = _compile(svc, k.endpoint_slice("web-6", "web", eps, [k.port(8080)], address_type="IPv6"))
    assert skipped == []
    assert _targets(desired, "fd00:198:18::100", "fd00:198:19::2:1") == {"[fd00:10:244:1::2]:8080"}


@pytest.mark.parametrize("text", ["300.1.1.1", " 198.19.2.10", "198.19.2.10 ", "fe80::1%eth0", "198.19.2.10/32", ""])
def test_a_bad_external_ip_is_left_out_alone_and_reported(text: str) -> None:
    desired, skipped = _compile(*_web(externalIPs=[text, "198.19.2.20"]))
    rest = "left out (the rest of the Service is used)"
    assert skipped == [f"Service default/web: spec.externalIPs[0]: invalid IP address {text!r}: {rest}"]
    assert _targets(desired, EXT1, "198.19.2.20") == BOTH  # the other externalIP
    assert _targets(desired, "10.244.2.9", "10.96.0.10") == BOTH  # the ClusterIP


# ---- status.loadBalancer.ingress[].ip


@pytest.mark.parametrize(
    ("text", "address"),
    [("198.019.001.010", "198.19.1.10"), ("::ffff:198.19.1.11", "198.19.1.11"), ("198.19.1.12", "198.19.1.12")],
)
def test_a_load_balancer_ip_in_a_legacy_spelling_is_served_as_kube_proxy_reads_it(text: str, address: str) -> None:
    desired, skipped = _compile(*_web(type="LoadBalancer", lb_ips=[text]))
    assert skipped == [] and _targets(desired, EXT1, address) == BOTH


def test_a_bad_load_balancer_ip_is_left_out_alone_and_only_vip_mode_ips_are_served() -> None:
    ingress = [
        {"ip": "198.19.1.300"},
        {"ip": "198.19.1.20", "ipMode": "VIP"},
        {"ip": "198.19.1.21", "ipMode": "Proxy"},  # the load balancer proxies: not ours
        {"ip": "198.19.1.22", "ipMode": "Other"},  # kube-proxy's IsVIPMode: unset or VIP only
        {"hostname": "lb.example"},
    ]
    desired, skipped = _compile(*_web(type="LoadBalancer", lb_ingress=ingress))
    assert skipped == [
        "Service default/web: status.loadBalancer.ingress[0].ip: invalid IP address '198.19.1.300': "
        "left out (the rest of the Service is used)"
    ]
    served = {key[0] for key in desired.tables[0].elements["service-ips"]}
    assert served == {"10.96.0.10", "198.19.1.20"}


# ---- spec.loadBalancerSourceRanges


@pytest.mark.parametrize(
    ("text", "allowed", "dropped"),
    [
        ("198.018.000.100/032", {EXT1}, {EXT2, FAR}),  # leading zeros in the address and the length
        ("::ffff:198.18.0.100/128", {EXT1}, {EXT2, FAR}),  # IPv4-mapped: the IPv4 /32
        ("::ffff:198.18.0.0/120", {EXT1, EXT2}, {FAR}),  # ... /24
        ("198.18.0.100/24", {EXT1, EXT2}, {FAR}),  # host bits set: the /24
        (" 198.18.0.100/32 ", {EXT1}, {EXT2, FAR}),  # padded: the API allows it, kube-proxy trims
        ("\u00a0198.18.0.100/32\u2003", {EXT1}, {EXT2, FAR}),  # Go's TrimSpace: Unicode spaces too
        ("::ffff:0.0.0.0/96", {EXT1, EXT2, FAR}, set()),  # 0.0.0.0/0
    ],
)
def test_a_source_range_in_a_legacy_spelling_limits_clients_as_kube_proxy_reads_it(
    text: str, allowed: set[str], dropped: set[str]
) -> None:
    desired, skipped = _compile(*_web(type="LoadBalancer", lb_ips=["198.19.1.10"], loadBalancerSourceRanges=[text]))
    assert skipped == []
    for src in allowed:
        assert _targets(desired, src, "198.19.1.10") == BOTH, src
    for src in dropped:
        assert _targets(desired, src, "198.19.1.10") == {"DROP"}, src


@pytest.mark.parametrize(
    "text",
    [
        "nope",
        "198.18.0.101",  # no length: ParseCIDRSloppy wants one (Python's ip_network would take it)
        "198.18.0.0/255.255.255.0",  # no netmask form
        "\x1c198.18.0.101/32",  # not a space to Go's TrimSpace (str.strip() would trim it)
        "198.18.0.101/33",
    ],
)
def test_a_bad_source_range_is_left_out_alone_and_reported(text: str) -> None:
    desired, skipped = _compile(
        *_web(type="LoadBalancer", lb_ips=["198.19.1.10"], loadBalancerSourceRanges=[text, "198.18.0.100/32"])
    )
    assert skipped == [
        f"Service default/web: spec.loadBalancerSourceRanges[0]: invalid CIDR {text!r}: "
        "left out (the rest of the Service is used)"
    ]
    assert _targets(desired, EXT1, "198.19.1.10") == BOTH
    assert _targets(desired, EXT2, "198.19.1.10") == {"DROP"}


# ---- spec.clusterIPs


@pytest.mark.parametrize(("text", "address"), [("010.096.000.010", "10.96.0.10"), ("::ffff:10.96.0.10", "10.96.0.10")])
def test_a_cluster_ip_in_a_legacy_spelling_is_served_as_kube_proxy_reads_it(text: str, address: str) -> None:
    svc, sl = _web()
    svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = text, [text]
    desired, skipped = _compile(svc, sl)
    assert skipped == [] and _targets(desired, "10.244.2.9", address) == BOTH


def test_a_bad_cluster_ip_leaves_the_service_out_as_nothing_can_be_served_without_it() -> None:
    svc, sl = _web()
    svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = " 10.96.0.10", [" 10.96.0.10"]
    desired, skipped = _compile(svc, sl)
    assert sorted(skipped) == [
        "EndpointSlice default/web-1: no Service default/web",
        "Service default/web: spec.clusterIPs: invalid IP address ' 10.96.0.10'",
    ]
    assert not desired.tables[0].elements.get("service-ips")


# ---- EndpointSlice endpoints[].addresses[0]


def test_endpoint_addresses_in_legacy_spellings_are_the_addresses_kube_proxy_reads() -> None:
    svc = k.service("web", ["10.96.0.10"], [k.port(80)])
    eps = [k.endpoint("010.244.001.002"), k.endpoint("::ffff:10.244.1.3")]
    desired, skipped = _compile(svc, k.endpoint_slice("web-1", "web", eps, [k.port(8080)]))
    assert skipped == [] and _targets(desired, "10.244.2.9", "10.96.0.10") == BOTH


def test_one_address_in_two_spellings_is_one_endpoint_as_kube_proxy_keys_them() -> None:
    svc = k.service("web", ["10.96.0.10"], [k.port(80)])
    eps = [k.endpoint(A1), k.endpoint("010.244.001.002"), k.endpoint(A2)]
    desired, _ = _compile(svc, k.endpoint_slice("web-1", "web", eps, [k.port(8080)]))
    tracer = tracers(desired.tables, [NODE])
    outcomes = next(iter(tracer.values())).trace(Packet("10.244.2.9", "10.96.0.10", 80)).outcomes
    assert sorted(o.target for o in outcomes) == sorted(BOTH)  # two slots, not three


def test_an_endpoint_kube_proxy_cannot_use_is_left_out_alone_and_reported_with_its_service() -> None:
    svc = k.service("web", ["10.96.0.10", "fd00:10:96::10"], [k.port(80)])
    v4 = [k.endpoint(A1), k.endpoint("fd00::1"), {"addresses": []}, k.endpoint("10.244.1.300"), k.endpoint(A2)]
    v6 = [k.endpoint("::ffff:10.244.1.3"), k.endpoint("fd00:10:244:1::2")]
    desired, skipped = _compile(
        svc,
        k.endpoint_slice("web-4", "web", v4, [k.port(8080)]),
        k.endpoint_slice("web-6", "web", v6, [k.port(8080)], address_type="IPv6"),
    )
    rest = "left out (the rest of the EndpointSlice is used)"
    assert sorted(skipped) == [
        f"Service default/web: EndpointSlice web-4: endpoints[1].addresses[0]: 'fd00::1' is not an IPv4 address: "
        f"{rest}",
        f"Service default/web: EndpointSlice web-4: endpoints[2]: no addresses: {rest}",
        f"Service default/web: EndpointSlice web-4: endpoints[3].addresses[0]: '10.244.1.300' is not an IPv4 address: "
        f"{rest}",
        f"Service default/web: EndpointSlice web-6: endpoints[0].addresses[0]: '::ffff:10.244.1.3' is not an IPv6 "
        f"address: {rest}",
    ]
    assert _targets(desired, "10.244.2.9", "10.96.0.10") == BOTH
    assert _targets(desired, "fd00:10:244:2::9", "fd00:10:96::10") == {"[fd00:10:244:1::2]:8080"}


# ---- Node status.addresses (the API does not validate them)


def test_node_addresses_are_read_as_kube_proxy_reads_them_and_a_bad_one_is_left_out() -> None:
    node = k.node(
        "n1",
        [("InternalIP", "not-an-ip"), ("InternalIP", "198.018.000.001"), ("ExternalIP", "::ffff:198.18.0.9")],
        **{"topology.kubernetes.io/zone": "z1"},
    )
    inputs = classify([node])
    (parsed,) = inputs.nodes
    assert isinstance(parsed, Node)
    assert parsed.addresses == (ip_address("198.18.0.1"), ip_address("198.18.0.9"))
    assert ProxyConfig().for_node(parsed).node_ips == (ip_address("198.18.0.1"),)
    assert parsed.zone == "z1"  # the Node is used
    assert [str(s) for s in inputs.skipped] == [
        "Node n1: status.addresses[0]: invalid InternalIP 'not-an-ip': left out (the rest of the Node is used)"
    ]


# ---- the operator reports them (ProxyStatus, Events) and forgets them once fixed


def test_items_left_out_are_in_the_status_until_their_objects_are_fixed() -> None:
    async def go() -> list[list[str]]:
        syncer, _ = make()
        syncer.changes.mark_loaded()
        seen = []
        svc, sl = _web(externalIPs=["198.19.2.300"])
        sl["endpoints"].append({"addresses": []})
        syncer.changes.service_changed("default/web", svc)
        syncer.changes.slice_changed("default/web-1", sl)
        syncer.changes.node_changed(k.node("n1", [("InternalIP", "198.18.0.1"), ("ExternalIP", "bad")]))
        await syncer.sync_once()
        seen.append([str(x) for x in syncer.status.skipped])
        svc, sl = _web()
        syncer.changes.service_changed("default/web", svc)
        syncer.changes.slice_changed("default/web-1", sl)
        syncer.changes.node_changed(k.node("n1", [("InternalIP", "198.18.0.1")]))
        syncer.schedule.full_due = True  # counts and reports of compiled Services refresh then (or each second)
        await syncer.sync_once()
        seen.append([str(x) for x in syncer.status.skipped])
        return seen

    with_bad, fixed = asyncio.run(go())
    assert with_bad == [
        "Node n1: status.addresses[1]: invalid ExternalIP 'bad': left out (the rest of the Node is used)",
        "Service default/web: EndpointSlice web-1: endpoints[2]: no addresses: "
        "left out (the rest of the EndpointSlice is used)",
        "Service default/web: spec.externalIPs[0]: invalid IP address '198.19.2.300': "
        "left out (the rest of the Service is used)",
    ]
    assert fixed == []
