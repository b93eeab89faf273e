"""The golden cases: fixed inputs and configs whose whole compiled output (tests/golden/*.nft),
explanations (explain-*.txt) and kernel state are reviewed as text. Used by the unit tests and by
the real-kernel tests, which must agree with them."""

from __future__ import annotations

from ipaddress import ip_address, ip_network
from pathlib import Path

from nftproxy.compiler import ProxyConfig, features
from nftproxy.compiler.config import nodeport_address

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
POLICIES = GOLDEN / "policies.yaml"

CASES: dict[str, tuple[Path, ProxyConfig]] = {
    "demo-default": (
        EXAMPLE,
        ProxyConfig(
            node_name="node-1",
            node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
        ),
    ),
    "demo-masquerade-all": (
        EXAMPLE,
        ProxyConfig(
            node_name="node-1",
            node_ips=(ip_address("198.18.0.1"),),
            nodeport_addresses=(ip_network("198.18.0.0/24"), ip_network("198.18.0.7/32")),
            masquerade_all=True,
        ),
    ),
    "policies": (
        POLICIES,
        ProxyConfig(
            node_name="node-1",
            node_zone="zone-a",
            node_ips=(ip_address("198.18.0.1"),),
            cluster_cidrs=(ip_network("10.244.0.0/16"),),
        ),
    ),
    "balancing": (
        GOLDEN / "balancing.yaml",
        ProxyConfig(
            node_name="node-1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),)
        ),
    ),
    "localhost": (
        GOLDEN / "localhost.yaml",
        ProxyConfig(
            node_name="node-1",
            node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
            nodeport_addresses=(*nodeport_address("primary"), *nodeport_address("localhost")),
            enabled_gates=frozenset({features.LOCALHOST_NODEPORTS}),
        ),
    ),
    # kube-proxy 1.38's default: the gate on, no localhost in --nodeport-addresses (no userspace
    # proxy): every protocol's localhost NodePorts rejected and counted
    "localhost-rejected": (
        GOLDEN / "localhost.yaml",
        ProxyConfig(
            node_name="node-1",
            node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
            enabled_gates=frozenset({features.LOCALHOST_NODEPORTS}),
        ),
    ),
}

# Services explained next to the golden cases' own, not in their input: "not programmed".
EXTRA = ["default/nope", "other/absent"]
