"""Golden rulesets: the compiler's whole output for fixed inputs, reviewed as text.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py``
and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.model.manifests import load
from nftproxy.nft.diff import plan
from tests.support.golden import CASES, EXAMPLE, GOLDEN


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
