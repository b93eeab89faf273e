"""Intentional differences from kube-proxy: the ONE list the differential suite accepts.

Each entry is a case name (tests/conformance/cases.py) with the reason nftproxy behaves
differently on purpose. The README section "Differences from kube-proxy" mirrors this list.
Any other DIFF fails the suite.
"""

from __future__ import annotations

INTENTIONAL: dict[str, str] = {}


def accepted(case: str) -> str | None:
    """The reason a DIFF in ``case`` is intentional, or None."""
    return INTENTIONAL.get(case)
