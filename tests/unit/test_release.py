"""One release, one version: nftproxy/__init__.py's ``__version__`` is the package's version
(pyproject.toml reads it), what `nftproxy --version` prints, what ProxyStatus and the
``nftproxy_build_info`` metric report, and the chart's appVersion (its default image tag): none
can drift from it. The licence is Apache-2.0 wherever it is declared."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from nftproxy import __version__
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.status import render_status
from tests.support.run import run_nftproxy
from tests.support.syncer import make

ROOT = Path(__file__).resolve().parents[2]
# semver.org's own pattern (no leading zeros; pre-release and build parts)
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def _pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_version_is_a_semantic_version() -> None:
    assert SEMVER.match(__version__), __version__


def test_package_metadata_reads_the_one_version() -> None:
    doc = _pyproject()
    project = doc["project"]
    assert isinstance(project, dict)
    assert "version" not in project and "version" in project["dynamic"]
    assert doc["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nftproxy.__version__"}  # type: ignore[index]


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((ROOT / "charts/nftproxy/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert SEMVER.match(chart["version"]), chart["version"]


def test_changelog_has_a_section_for_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[?([^\]\s]+)\]?", text, re.M)
    assert headings and headings[0] == __version__, headings


def test_version_flag_prints_the_version() -> None:
    r = run_nftproxy("--version", check=True)
    assert r.stdout == f"nftproxy {__version__}\n"


def test_proxystatus_and_build_info_metric_report_the_version() -> None:
    syncer, _ = make()
    assert render_status(syncer)["version"] == __version__
    text = generate_latest(Metrics().registry).decode()
    assert f'nftproxy_build_info{{version="{__version__}"}} 1.0' in text.splitlines()


def test_licence_is_apache_2_everywhere_it_is_declared() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in licence and "APPENDIX: How to apply the Apache License" in licence
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in dockerfile
    assert "NOASSERTION" not in dockerfile
    assert "!LICENSE" in (ROOT / ".dockerignore").read_text().splitlines()  # the build stage copies it
