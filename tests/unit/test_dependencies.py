"""Every package nftproxy imports is declared in pyproject.toml (its distribution, pinned), so an
install from the project's metadata alone has what the code imports."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# not from PyPI: Debian's python3-nftables (libnftables' own binding), see pyproject.toml
SYSTEM = {"nftables"}


def _imported(package: Path) -> set[str]:
    """The top-level names of every import in ``package`` (function-level ones too)."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_of_nftproxy_is_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_normal(re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0]) for d in project["dependencies"]}
    third_party = _imported(ROOT / "nftproxy") - set(sys.stdlib_module_names) - {"nftproxy"} - SYSTEM
    distributions = importlib.metadata.packages_distributions()
    undeclared = {
        name: distributions.get(name)
        for name in third_party
        if not {_normal(d) for d in distributions.get(name, [name])} & declared
    }
    assert not undeclared, f"imported but not in [project] dependencies: {undeclared}"
    assert {"aiohttp", "kopf", "kubernetes", "yaml"} <= third_party  # the scan sees them
