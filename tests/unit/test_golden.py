"""Golden rulesets: the compiler's whole output for fixed inputs, reviewed as text.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py``
and review the diff like code.
"""

from __future__ import annotations

import os
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.model.manifests import load
from nftproxy.nft.diff import plan

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
}


def render(source: Path, config: ProxyConfig) -> str:
    inputs = load([str(source)])
    desired = compile_tables(inputs.services, inputs.slices, config, inputs.ignored)
    return "".join(plan(None, t).render() for t in desired.tables)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_ruleset(case: str) -> None:
    text = render(*CASES[case])
    path = GOLDEN / f"{case}.nft"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_compile_is_deterministic_whatever_the_input_order() -> None:
    inputs = load([str(EXAMPLE)])
    cfg = CASES["demo-default"][1]
    a = compile_tables(inputs.services, inputs.slices, cfg)
    b = compile_tables(reversed(inputs.services), reversed(inputs.slices), cfg)
    assert [plan(None, t).render() for t in a.tables] == [plan(None, t).render() for t in b.tables]
