"""README.md, read as an operator reads it: every command it shows exists, every link resolves, and
its Differences table is tests/conformance/differences.py's list.

The commands are checked against the real CLI parser (`nftproxy.cli.build_parser`), the Makefile's
targets and the chart's values.yaml; running them on a cluster is tests/e2e's job.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nftproxy.cli import build_parser
from tests.conformance.differences import COMPARED, INTENTIONAL, RELEASES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHART_README = ROOT / "charts" / "nftproxy" / "README.md"
DOCS = [README, ROOT / "CHANGELOG.md", CHART_README, *sorted((ROOT / "docs").glob("*.md"))]


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def code(text: str) -> list[str]:
    """Every line of the README's fenced code blocks and every inline `code` span outside them."""
    blocks = re.findall(r"^ *```[a-z]*\n(.*?)^ *```", text, flags=re.S | re.M)
    prose = re.sub(r"^ *```[a-z]*\n.*?^ *```", "", text, flags=re.S | re.M)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", prose)


def test_the_readme_opens_with_make_demo_and_make_test() -> None:
    """The first code block is the two commands of a fresh machine; .ci/run runs the second."""
    first = re.search(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    assert "\nmake test\n" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_differences_table_is_the_list_of_intentional_differences() -> None:
    """Each row names its cases in backquotes and the kube-proxy releases they differ from; together
    the rows name every entry of INTENTIONAL, with RELEASES' releases, and nothing else."""
    table = [
        line
        for line in section(README.read_text(), "Differences from kube-proxy").splitlines()
        if line.startswith("| `")
    ]
    listed: dict[str, tuple[int, ...]] = {}
    for line in table:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        releases = tuple(int(minor) for minor in re.findall(r"v1\.(\d+)", cells[-1]))
        for case in re.findall(r"`([^`]+)`", cells[0]):
            listed[case] = releases
    expected = {case: RELEASES.get(case, COMPARED) for case in INTENTIONAL}
    assert listed == expected


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def nftproxy_commands(text: str) -> list[list[str]]:
    """The words of each `nftproxy ...` command the README shows (a line or span that starts with
    it, or `kubectl exec POD -- nftproxy ...`), up to a shell separator."""
    found = []
    for line in code(text):
        for match in re.finditer(r"(?:^|-- )nftproxy ([^;|#)]+)", line):
            words = match.group(1).split()
            if not words[0].endswith(":"):  # `nftproxy verify: in sync: ...` is its output
                found.append(words)
    return found


def test_every_nftproxy_command_in_the_readme_is_the_cli_s() -> None:
    """Each subcommand the README shows exists and each of its --flags is one of that subcommand's."""
    commands = nftproxy_commands(README.read_text())
    assert {words[0] for words in commands} >= {"list", "explain", "trace", "verify", "cleanup", "--version"}
    sub = subparsers(build_parser())
    unknown = []
    for words in commands:
        if words[0].startswith("-"):
            unknown += [words[0]] if words[0] != "--version" else []
            continue
        parser = sub.get(words[0])
        if parser is None:
            unknown.append(words[0])
            continue
        options = {opt for action in parser._actions for opt in action.option_strings}
        unknown += [f"{words[0]} {w}" for w in words[1:] if w.startswith("-") and w.split("=")[0] not in options]
    assert unknown == []


def test_every_make_target_in_the_readme_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    named = {m for line in code(README.read_text()) for m in re.findall(r"\bmake ([a-z][a-z0-9-]*)", line)}
    assert named >= {"demo", "test", "demo-down", "release"}
    assert named - targets == set()


def value_exists(schema: dict[str, Any], key: str) -> bool:
    """`a.b.c` (Helm's --set path, `\\.` an escaped dot) is a value the chart's values.schema.json
    names, or a key of a map it takes whole (nodeSelector, featureGates: additionalProperties)."""
    node = schema
    for part in re.split(r"(?<!\\)\.", key):
        if part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
    return True


def test_every_chart_value_in_the_readme_exists() -> None:
    """Each `--set KEY=...`, each value of the Configuration table's chart column and each value the
    Operating section names."""
    text = README.read_text()
    schema = json.loads((ROOT / "charts" / "nftproxy" / "values.schema.json").read_text())
    keys = set(re.findall(r"--set(?:-string)? '?([A-Za-z][\w.\\/-]*)=", text))
    for line in section(text, "Configuration").splitlines():
        if line.startswith("| `"):
            keys |= {k for k in re.findall(r"`([a-zA-Z][\w.]*)`", line.split("|")[3]) if k != "conntrack.*"}
    keys |= set(re.findall(r"`([a-z][A-Za-z]+(?:\.[a-zA-Z]+)*)`", section(text, "Operating it")))
    keys = {k for k in keys if not k.startswith(("nftproxy_", "rest_client"))}
    assert {"cleanupKubeProxy", "kubeProxyConfig.fromConfigMap", "nodeSelector.nftproxy\\.io/proxy"} <= keys
    assert sorted(k for k in keys if not value_exists(schema, k)) == []


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_docs_resolves(doc: Path) -> None:
    """Relative links name a file of the repository, and a #fragment one of its headings."""
    text = re.sub(r"^ *```.*?^ *```", "", doc.read_text(), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, fragment = target.partition("#")
        path = (doc.parent / name).resolve() if name else doc
        missing = not path.exists() or not path.is_relative_to(ROOT)
        if missing or (fragment and path.suffix == ".md" and fragment not in anchors(path)):
            broken.append(target)
    assert broken == []
