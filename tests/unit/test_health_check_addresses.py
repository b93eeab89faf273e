"""Where a healthCheckNodePort server listens (ProxyConfig.health_check_addresses), and the
rtnetlink address dump it matches against."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig, features
from nftproxy.compiler.config import nodeport_address
from nftproxy.nft.addresses import LocalAddresses
from nftproxy.operator.health import HealthCheckServers

LOCAL = [ip_address(a) for a in ("127.0.0.1", "198.18.0.1", "10.244.1.1", "::1", "fd00:198:18::1", "fd00:10:244:1::1")]


def config(*cidrs: str, node_ips: tuple[str, ...] = ("198.18.0.1", "fd00:198:18::1")) -> ProxyConfig:
    return ProxyConfig(
        node_ips=tuple(ip_address(a) for a in node_ips), nodeport_addresses=tuple(ip_network(c) for c in cidrs)
    )


def test_default_is_the_primary_ips_only() -> None:
    assert config().health_check_addresses(LOCAL) == ["198.18.0.1", "fd00:198:18::1"]


def test_a_primary_ip_not_on_the_node_is_not_bound() -> None:
    assert config(node_ips=("198.18.0.9", "fd00:198:18::9")).health_check_addresses(LOCAL) == []


def test_cidrs_match_the_node_addresses() -> None:
    assert config("10.244.0.0/16", "fd00:10:244::/48").health_check_addresses(LOCAL) == [
        "10.244.1.1",
        "fd00:10:244:1::1",
    ]


def test_a_family_without_a_cidr_accepts_nodeports_on_all_its_addresses() -> None:
    """kube-proxy's NewNodePortAddresses: no CIDR of a family means that family's /0, also for
    ``primary`` on a node without a primary IP of that family."""
    assert config("10.244.0.0/16").health_check_addresses(LOCAL) == ["10.244.1.1", "::"]
    assert config(node_ips=("198.18.0.1",)).health_check_addresses(LOCAL) == ["198.18.0.1", "::"]


def test_nodeport_address_keywords() -> None:
    """kube-proxy v1.37's expandNodePortAddressKeywords: primary, localhost, all, mixed with CIDRs."""
    c = ProxyConfig(
        node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
        nodeport_addresses=(
            *nodeport_address("primary"),
            *nodeport_address("localhost"),
            *nodeport_address("10.0.0.0/8"),
        ),
        enabled_gates=frozenset({features.LOCALHOST_NODEPORTS}),
    )
    assert [str(n) for n in c.nodeport_networks(4)] == ["198.18.0.1/32", "127.0.0.0/8", "10.0.0.0/8"]
    assert [str(n) for n in c.nodeport_networks(6)] == ["fd00:198:18::1/128", "::1/128"]
    # nftables cannot DNAT loopback: the kernel's set leaves it out, the userspace proxy serves it
    assert c.nodeport_ip_elements(4) == ["10.0.0.0/8", "198.18.0.1"]
    assert c.nodeport_ip_elements(6) == ["fd00:198:18::1"]
    assert c.localhost_nodeports(4) and c.localhost_nodeports(6)
    every = ProxyConfig(nodeport_addresses=nodeport_address("all"))
    assert every.nodeport_ip_elements(4) == ["0.0.0.0-126.255.255.255", "128.0.0.0/1"]
    assert every.nodeport_ip_elements(6) == ["::", "::2-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
    assert not every.localhost_nodeports(4) and not every.localhost_nodeports(6)
    with pytest.raises(ValueError):
        nodeport_address("everywhere")


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(host: str, port: int) -> tuple[int, dict[str, object]] | str:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError as e:
        return type(e.reason if isinstance(e, urllib.error.URLError) else e).__name__


def test_servers_bind_the_families_of_the_service_on_the_config_addresses() -> None:
    """Real listeners on loopback (this namespace's own address): the Service's families only,
    each answering its own family's count; a new config moves them."""
    port = _free_port()
    hc = HealthCheckServers(None, "n", lambda: True)
    loopback = ProxyConfig(nodeport_addresses=(ip_network("127.0.0.1/32"), ip_network("::1/128")))

    async def scenario() -> list[object]:
        loop = asyncio.get_running_loop()
        seen: list[object] = []
        try:
            await hc.update({port: ("ns/web", {4: 2})}, loopback)
            seen.append(sorted(h for _, h in hc.runners))
            seen.append(await loop.run_in_executor(None, _get, "127.0.0.1", port))
            await hc.update({port: ("ns/web", {4: 0, 6: 1})}, loopback)
            seen.append(sorted(h for _, h in hc.runners))
            seen.append(await loop.run_in_executor(None, _get, "127.0.0.1", port))
            await hc.update({port: ("ns/web", {4: 2})}, ProxyConfig(nodeport_addresses=(ip_network("127.0.0.9/32"),)))
            seen.append(sorted(h for _, h in hc.runners))  # not an address of this namespace
            seen.append(await loop.run_in_executor(None, _get, "127.0.0.1", port))
        finally:
            await hc.close()
        return seen

    if not any(a.version == 6 for a in LocalAddresses(None).list()):
        pytest.skip("no IPv6 loopback here")
    seen = asyncio.run(scenario())
    body = {"service": {"namespace": "ns", "name": "web"}, "localEndpoints": 2, "serviceProxyHealthy": True}
    assert seen[0] == ["127.0.0.1"]
    assert seen[1] == (200, body)
    assert seen[2] == ["127.0.0.1", "::1"]
    assert seen[3] == (503, {**body, "localEndpoints": 0})
    assert seen[4] == []
    assert seen[5] == "ConnectionRefusedError"
