"""Where a healthCheckNodePort server listens (ProxyConfig.health_check_addresses), and the
rtnetlink address dump it matches against."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from nftproxy.compiler import ProxyConfig
from nftproxy.nft.addresses import LocalAddresses

LOCAL = [ip_address(a) for a in ("127.0.0.1", "198.18.0.1", "10.244.1.1", "::1", "fd00:198:18::1", "fd00:10:244:1::1")]


def config(*cidrs: str, node_ips: tuple[str, ...] = ("198.18.0.1", "fd00:198:18::1")) -> ProxyConfig:
    return ProxyConfig(
        node_ips=tuple(ip_address(a) for a in node_ips), nodeport_addresses=tuple(ip_network(c) for c in cidrs)
    )


def test_default_is_the_primary_ips_only() -> None:
    assert config().health_check_addresses(LOCAL) == ["198.18.0.1", "fd00:198:18::1"]


def test_a_primary_ip_not_on_the_node_is_not_bound() -> None:
    assert config(node_ips=("198.18.0.9",)).health_check_addresses(LOCAL) == []


def test_cidrs_match_the_node_addresses() -> None:
    assert config("10.244.0.0/16").health_check_addresses(LOCAL) == ["10.244.1.1"]  # no IPv6 NodePorts either


def test_all_addresses_one_listener_per_family() -> None:
    assert config("0.0.0.0/0", "::/0").health_check_addresses(LOCAL) == ["0.0.0.0", "::"]
    assert config("198.18.0.0/24", "::/0").health_check_addresses(LOCAL) == ["198.18.0.1", "::"]


def test_the_address_dump_lists_this_namespace() -> None:
    la = LocalAddresses(None)
    try:
        got = la.list()
    finally:
        la.close()
    assert ip_address("127.0.0.1") in got
