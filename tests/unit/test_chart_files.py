"""The Helm chart's files, read as they are (no helm, no control plane; tests/k8s/test_chart.py
renders and installs the chart)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nftproxy"
CRD_NAME = "proxystatuses.nftproxy.io"


def test_the_crd_has_one_copy() -> None:
    """The ProxyStatus CRD lives in charts/nftproxy/crds/ (Helm's place for it) and nowhere else:
    tests, benchmarks and the demo apply that file."""
    (crd,) = (CHART / "crds").glob("*.yaml")
    assert yaml.safe_load(crd.read_text())["metadata"]["name"] == CRD_NAME
    # The files git knows of (tracked, or new and not ignored): no .venv, caches or build output.
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    copies = []
    for name in listed:
        path = REPO / name
        if not name or path.suffix not in (".yaml", ".yml", ".json") or path == crd or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if "CustomResourceDefinition" in text and CRD_NAME in text:
            copies.append(name)
    assert copies == [], f"another copy of the CRD: {copies}"
    assert not (REPO / "crds").exists(), "crds/ is gone: the CRD is charts/nftproxy/crds/proxystatus.yaml"


def test_values_schema_and_readme_cover_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    assert schema["additionalProperties"] is False
    assert set(values) == set(schema["properties"]), "values.yaml and values.schema.json disagree"
    undocumented = [k for k in values if f"| `{k}" not in readme and f"`{k}`" not in readme]
    assert undocumented == [], "values missing from the README's table"


SIZING = "### Memory and start-up by cluster size"
_ROW = re.compile(r"\| ([\d,]+) \| ([\d,]+) MB \| ([\d,]+) MB \| ([\d.]+) s \|")


def _sizing() -> tuple[str, list[tuple[int, int, int, float]]]:
    """The README's measured table: (Services, MB after the first sync, peak MB, start s)."""
    section = (CHART / "README.md").read_text().split(SIZING, 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        if m := _ROW.fullmatch(line):
            after, peak = int(m[2].replace(",", "")), int(m[3].replace(",", ""))
            rows.append((int(m[1].replace(",", "")), after, peak, float(m[4])))
    return section, rows


def test_the_readme_sizes_memory_and_start_by_services_and_the_defaults_follow_it() -> None:
    """No memory limit by default (the table instead, as kube-proxy's DaemonSet sets none), and a
    startup probe whose budget covers the largest measured start at least three times over."""
    section, rows = _sizing()
    assert [n for n, *_ in rows] == [1_000, 10_000, 50_000, 100_000]
    assert all(0 < after <= peak for _, after, peak, _ in rows), rows
    assert [peak for *_, peak, _ in rows] == sorted(peak for *_, peak, _ in rows), "memory grows with Services"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert "limits" not in values["resources"], "a default limit would crash-loop a large cluster's proxy"
    probe = values["startupProbe"]
    budget = probe["periodSeconds"] * probe["failureThreshold"]
    largest = rows[-1][3]
    assert budget >= 3 * largest, f"startupProbe budget {budget}s against a measured start of {largest}s"
    assert f"{budget} s is about {budget / largest:.0f}\u00d7 the start" in " ".join(section.split())
