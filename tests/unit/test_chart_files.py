"""The Helm chart's files, read as they are (no helm, no control plane; tests/k8s/test_chart.py
renders and installs the chart)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nftproxy"


def test_chart_crds_are_the_canonical_ones() -> None:
    canonical = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == canonical, "charts/nftproxy/crds/ must hold exactly the files of crds/"
    for name in canonical:
        assert (CHART / "crds" / name).read_bytes() == (REPO / "crds" / name).read_bytes(), (
            f"charts/nftproxy/crds/{name} differs from crds/{name}: run `cp crds/*.yaml charts/nftproxy/crds/`"
        )


def test_values_schema_and_readme_cover_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    assert schema["additionalProperties"] is False
    assert set(values) == set(schema["properties"]), "values.yaml and values.schema.json disagree"
    undocumented = [k for k in values if f"| `{k}" not in readme and f"`{k}`" not in readme]
    assert undocumented == [], "values missing from the README's table"
