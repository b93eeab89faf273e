"""Addresses in every spelling kube-proxy's parsers read (the legacy ones an apiserver before 1.36
stores: leading zeros, IPv4-mapped IPv6, host bits, padded source ranges) are read as the address
kube-proxy reads; the C shortcuts of the parser never answer otherwise than the Go code's own path;
and no item of an object is lost silently: each is used, or reported left out."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nftproxy.model.parse import parse_endpoint_slice, parse_service, parse_service_cidr
from nftproxy.model.sloppy import go_parse_ip, go_trim_space, parse_cidr_sloppy, parse_ip_sloppy
from nftproxy.model.types import EndpointSlice, Service, ServiceCIDR
from tests.fuzz import strategies as S
from tests.support.fuzzing import examples


def _as_kubernetes_sees(a: IPv4Address | IPv6Address) -> IPv4Address | IPv6Address:
    """IPFamilyOf: an IPv4-mapped IPv6 address is IPv4."""
    return (a.ipv4_mapped or a) if isinstance(a, IPv6Address) else a


def _net_as_kubernetes_sees(n: IPv4Network | IPv6Network) -> IPv4Network | IPv6Network:
    mapped = n.network_address.ipv4_mapped if isinstance(n, IPv6Network) else None
    if mapped is not None and n.prefixlen >= 96:
        return IPv4Network((int(mapped), n.prefixlen - 96))
    return n


@settings(max_examples=examples(2000, 50000))
@given(addr=st.ip_addresses(), data=st.data())
def test_a_legacy_spelling_of_an_address_is_read_as_that_address(addr: Any, data: Any) -> None:
    text = data.draw(S.respelled_ip(addr))
    assert parse_ip_sloppy(text) == _as_kubernetes_sees(addr), text
    assert go_parse_ip(text) == _as_kubernetes_sees(addr), text


@settings(max_examples=examples(2000, 50000))
@given(addr=st.ip_addresses(), length=st.integers(0, 128), padded=st.booleans(), data=st.data())
def test_a_legacy_spelling_of_a_cidr_is_read_as_that_cidr(addr: Any, length: int, padded: bool, data: Any) -> None:
    net = ip_network(f"{addr}/{min(length, addr.max_prefixlen)}", strict=False)
    text = data.draw(S.respelled_cidr(net, padded))
    assert parse_cidr_sloppy(go_trim_space(text)) == _net_as_kubernetes_sees(net), text


_ADDRESS_ALPHABET = "0123456789abcdefABCDEF.:/%x \u00a0\x00"


@settings(max_examples=examples(4000, 100000))
@given(
    text=st.one_of(
        st.text(_ADDRESS_ALPHABET, max_size=45),
        S.ip(S.SVC4 + S.SVC6 + S.EXT4 + S.EXT6),
        st.ip_addresses().map(str),
    )
)
def test_the_c_shortcuts_answer_as_the_go_code_path(text: Any) -> None:
    """parse_ip_sloppy tries glibc's inet_pton first: it must never take a text the Go code
    refuses, nor read one otherwise (the Go path itself is checked against Go: tests/unit)."""
    if isinstance(text, str):
        assert parse_ip_sloppy(text) == go_parse_ip(text)


def _warned(warnings: tuple[str, ...], field: str) -> int:
    return sum(w.startswith(f"{field}[") for w in warnings)


@settings(max_examples=examples(600, 10000))
@given(obj=S.service())
def test_every_external_ip_and_source_range_is_used_or_reported(obj: Any) -> None:
    svc = parse_service(obj)
    if not isinstance(svc, Service):
        return
    spec = obj["spec"]
    given_ips, given_ranges = spec.get("externalIPs") or [], spec.get("loadBalancerSourceRanges") or []
    assert len(svc.external_ips) + _warned(svc.warnings, "spec.externalIPs") == len(given_ips)
    assert len(svc.load_balancer_source_ranges) + _warned(svc.warnings, "spec.loadBalancerSourceRanges") == len(
        given_ranges
    )


@settings(max_examples=examples(600, 10000))
@given(obj=S.endpoint_slice())
def test_every_endpoint_is_used_or_reported(obj: Any) -> None:
    sl = parse_endpoint_slice(obj)
    if not isinstance(sl, EndpointSlice):
        return
    assert len(sl.endpoints) + _warned(sl.warnings, "endpoints") == len(obj.get("endpoints") or [])


@settings(max_examples=examples(600, 10000))
@given(obj=S.service_cidr())
def test_every_service_cidr_range_is_used_or_reported(obj: Any) -> None:
    c = parse_service_cidr(obj)
    if not isinstance(c, ServiceCIDR):
        return
    assert len(c.cidrs) + _warned(c.warnings, "spec.cidrs") == len((obj.get("spec") or {}).get("cidrs") or [])
    assert all(n.prefixlen >= (8 if n.version == 4 else 16) for n in c.cidrs)
