"""The netlink packer's short way for key-only sets gives the same bytes as the general one."""

from __future__ import annotations

import pytest

from nftproxy.nft.netlink import Layout
from nftproxy.nft.objects import Element, Set


@pytest.mark.parametrize(
    ("spec", "keys"),
    [
        ("type ipv4_addr . ipv4_addr", [("10.0.0.1", "10.0.0.1"), ("10.0.0.2", "10.0.0.2")]),
        ("type ipv6_addr . ipv6_addr", [("fd00::1", "fd00::1"), ("fd00::2", "fd00::2")]),
        ("type ipv4_addr", [("10.0.0.1",), ("10.0.0.9",)]),
        ("type ipv4_addr . inet_proto . inet_service", [("10.96.0.1", "tcp", "80"), ("10.96.0.2", "udp", "53")]),
    ],
)
def test_pack_all_equals_pack_element_by_element(spec: str, keys: list[tuple[str, ...]]) -> None:
    layout = Layout.for_set(Set("s", spec))
    assert layout is not None
    elements = [Element(k) for k in keys] + [Element(keys[0], None, "ns/name:port")]  # with a comment
    packed = layout.pack_all(elements)
    assert packed == [layout.pack(e) for e in elements]
    assert len(set(packed)) == len(elements)


def test_pack_all_of_a_map_packs_values_too() -> None:
    layout = Layout.for_set(Set("m", "type ipv4_addr . inet_proto . inet_service : verdict"))
    assert layout is not None
    elements = [Element(("10.96.0.1", "tcp", "80"), ("goto svc-1",)), Element(("10.96.0.2", "tcp", "80"), ("drop",))]
    assert layout.pack_all(elements) == [layout.pack(e) for e in elements]
