"""Reading a table back from `nft -j list table`: the JSON of nft 1.0.6 (this machine's) and of
nft 1.1.x (the image's), which differ for typeof sets (every set of layout 4)."""

from __future__ import annotations

from typing import Any

import pytest

from nftproxy.nft.listing import parse_rules, table_comment, table_from_json
from nftproxy.nft.objects import Family

KEY = [{"payload": {"protocol": "ip", "field": "daddr"}}, {"meta": {"key": "l4proto"}}]
KEY.append({"payload": {"protocol": "th", "field": "dport"}})
# The "type" of `typeof ip daddr . meta l4proto . th dport : verdict`, as each version prints it.
TYPES = {
    "1.0.6": ["ipv4_addr", "inet_proto", "inet_service"],
    "1.1.3": {"typeof": {"concat": KEY}},
}


def doc(types: Any, proto: str) -> dict[str, Any]:
    element = {"elem": {"val": {"concat": ["10.96.0.10", proto, 80]}, "comment": "default/web:http"}}
    service_ips: dict[str, Any] = {
        "family": "ip",
        "name": "service-ips",
        "table": "nftproxy",
        "type": types,
        "map": "verdict",
    }
    service_ips["elem"] = [[element, {"goto": {"target": "cluster-2"}}]]
    cluster_ips: dict[str, Any] = {"family": "ip", "name": "cluster-ips", "table": "nftproxy"}
    cluster_ips["type"] = {"typeof": {"payload": {"protocol": "ip", "field": "daddr"}}}
    cluster_ips["elem"] = ["10.96.0.10"]
    return {"nftables": [{"map": service_ips}, {"set": cluster_ips}]}


@pytest.mark.parametrize("version", sorted(TYPES))
@pytest.mark.parametrize("proto", ["tcp", "6"])
def test_elements_read_back_the_same_from_either_versions_json(version: str, proto: str) -> None:
    """A protocol printed as a number (no /etc/protocols) is named as the compiler names it, also
    when nft 1.1 describes the key by its typeof expressions."""
    t = table_from_json(doc(TYPES[version], proto), Family.IP, "nftproxy", "c")
    [(key, element)] = t.elements["service-ips"].items()
    assert key == ("10.96.0.10", "tcp", "80")
    assert element.value == ("goto cluster-2",) and element.comment == "default/web:http"
    assert list(t.elements["cluster-ips"]) == [("10.96.0.10",)]


# `nft -t list table ip nftproxy` (nft 1.0.6, abridged): sets, a base chain, a plain one.
TERSE = """table ip nftproxy {
	comment "nftproxy layout 5 rules 0123: managed by nftproxy, do not edit"
	map service-ips {
		typeof ip daddr . meta l4proto . th dport : verdict
		comment "Service IP . proto . port -> goto its chain"
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		comment "-100 (dstnat): DNAT Service traffic entering the node, before routing"
		jump services
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
		counter
	}
}
"""


def test_a_terse_listing_gives_each_chains_rules_and_the_table_comment() -> None:
    assert parse_rules(TERSE) == {
        "nat-prerouting": ("jump services",),
        "services": ("ip daddr . meta l4proto . th dport vmap @service-ips",),
    }
    assert table_comment(TERSE) == "nftproxy layout 5 rules 0123: managed by nftproxy, do not edit"
    assert table_comment("table ip other {\n}\n") == ""
