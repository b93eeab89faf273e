"""docs/kube-proxy-map.md: every row names a case that exists.

A case cell names, in backquotes, conformance cases (the names of tests/conformance/cases.py's
Case, FlowCase and ChangeCase objects, and of its Node-change cases) or test functions
(``tests/<path>.py::test_name``). A row with an empty case cell, a name that is neither, or a
``pending`` marker (a case still to be written) fails.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.conformance import cases as c

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "kube-proxy-map.md"
COLUMNS = ("kube-proxy", "nftproxy", "same / differs", "case(s)")


def cells(line: str) -> list[str]:
    """A table row's cells (``\\|`` inside a cell is a literal bar)."""
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.replace("\\|", "|").strip() for cell in re.split(r"(?<!\\)\|", inner)]


def rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every body row of every table."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or re.fullmatch(r"\|(\s*-+\s*\|)+", line.strip()):
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if re.fullmatch(r"\|(\s*-+\s*\|)+", following.strip()):
            continue  # a header row
        out.append((i + 1, cells(line)))
    return out


@cache
def case_names() -> frozenset[str]:
    names = {x.name for x in c.catalog()} | {x.name for x in c.flow_cases()} | {x.name for x in c.change_cases()}
    names |= {c.node_ip_change()[0], c.node_zone_change()[0]}
    return frozenset(names)


@cache
def functions(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def unknown(token: str) -> str | None:
    """Why ``token`` names no case (None: it does)."""
    if "::" in token:
        path, _, func = token.partition("::")
        if not path.startswith("tests/") or not path.endswith(".py") or not (ROOT / path).is_file():
            return f"{path}: no such test module"
        return None if func in functions(path) else f"{path} has no function {func}"
    return None if token in case_names() else f"no conformance case {token!r}"


def problems(text: str) -> list[str]:
    out = []
    for number, row in rows(text):
        if len(row) != len(COLUMNS):
            out.append(f"line {number}: {len(row)} cells, not {len(COLUMNS)}")
            continue
        cell = row[-1]
        if "pending" in cell:
            out.append(f"line {number}: a case is pending: {cell}")
        tokens = re.findall(r"`([^`]+)`", cell)
        if not tokens:
            out.append(f"line {number}: no case")
        out += [f"line {number}: {why}" for t in tokens if (why := unknown(t))]
    return out


def test_every_row_of_the_map_names_cases_that_exist() -> None:
    text = MAP.read_text()
    assert len(rows(text)) > 100, "the map's tables were not found"
    bad = problems(text)
    assert not bad, "docs/kube-proxy-map.md:\n" + "\n".join(bad)


def test_the_check_fails_on_an_empty_cell_a_pending_marker_and_an_unknown_name() -> None:
    header = "| kube-proxy | nftproxy | same / differs | case(s) |\n|---|---|---|---|\n"
    assert problems(header + "| a | b | same | `cip-basic`, `tests/unit/test_kube_proxy_map.py::cells` |\n") == []
    assert problems(header + "| a | b | same |  |\n") == ["line 3: no case"]
    pending = problems(header + "| a | b | same | `cip-basic` <!-- pending: fw --> |\n")
    assert pending == ["line 3: a case is pending: `cip-basic` <!-- pending: fw -->"]
    assert problems(header + "| a | b | same | `no-such-case` |\n") == ["line 3: no conformance case 'no-such-case'"]
    assert problems(header + "| a | b | same | `tests/unit/test_kube_proxy_map.py::nothing` |\n") == [
        "line 3: tests/unit/test_kube_proxy_map.py has no function nothing"
    ]
    assert problems(header + "| a \\| b | c | same | `cip-basic` |\n") == []  # an escaped bar stays in its cell
