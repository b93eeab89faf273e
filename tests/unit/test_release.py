"""One release, one version: nftproxy/__init__.py's ``__version__`` is the package's version
(pyproject.toml reads it), what `nftproxy --version` prints, what ProxyStatus and the
``nftproxy_build_info`` metric report, and the chart's appVersion (its default image tag): none
can drift from it. The licence is Apache-2.0 wherever it is declared.

`make release` (hack/release.sh) names its artefacts after that version and refuses a working tree
with uncommitted changes: checked here with --dry-run in a scratch git repository holding the
script and the files it reads (the build itself: tests/e2e/test_realcluster.py installs its output).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
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


# ---------------------------------------------------------------------------------------------- make release

RELEASE_INPUTS = ("hack/release.sh", "nftproxy/__init__.py", "charts/nftproxy/Chart.yaml", ".gitignore")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def scratch_repo(tmp_path: Path) -> Path:
    """A git repository whose one commit holds hack/release.sh and what it reads."""
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    repo = tmp_path / "repo"
    for name in RELEASE_INPUTS:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "release inputs")
    return repo


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "hack/release.sh"), *args], capture_output=True, text=True, check=False, timeout=30
    )


def test_release_names_its_artefacts_after_the_version(scratch_repo: Path) -> None:
    r = _release(scratch_repo, "--dry-run")
    assert r.returncode == 0, r.stderr
    names = json.loads(r.stdout)
    chart = yaml.safe_load((ROOT / "charts/nftproxy/Chart.yaml").read_text())
    assert names["version"] == __version__
    assert names["chart"] == f"nftproxy-{chart['version']}.tgz"  # `helm package`'s name, `helm push`'s tag
    assert names["image"] == f"nftproxy:{__version__}"
    assert names["image_archive"] == f"nftproxy-{__version__}-image-amd64.tar"
    assert names["sbom"] == f"nftproxy-{__version__}.spdx.json"
    assert names["checksums"] == "SHA256SUMS"
    # the packaged chart's default image is the archive's tag
    values = yaml.safe_load((ROOT / "charts/nftproxy/values.yaml").read_text())
    assert values["image"]["tag"] == ""
    assert f"{values['image']['repository']}:{chart['appVersion']}" == names["image"]
    assert json.loads(_release(scratch_repo, "--dry-run", "--no-sbom").stdout)["sbom"] is None


def test_release_refuses_a_working_tree_with_uncommitted_changes(scratch_repo: Path) -> None:
    # its own output (dist/, ignored) does not count
    (scratch_repo / "dist").mkdir()
    (scratch_repo / "dist" / "SHA256SUMS").write_text("")
    assert _release(scratch_repo, "--dry-run").returncode == 0
    for change in ("modified", "untracked"):
        if change == "modified":
            (scratch_repo / "charts/nftproxy/Chart.yaml").write_text("version: 9.9.9\n")
        else:
            _git(scratch_repo, "checkout", "-q", "--", ".")
            (scratch_repo / "notes.txt").write_text("x")
        r = _release(scratch_repo, "--dry-run")
        assert r.returncode == 1, (change, r.stdout)
        assert r.stdout == ""
        assert r.stderr.count("\n") == 1 and "uncommitted changes" in r.stderr, r.stderr
        assert "commit or stash them" in r.stderr
    assert _release(scratch_repo, "--dry-run", "--allow-dirty").returncode == 0


def test_release_refuses_a_tree_outside_git(tmp_path: Path) -> None:
    for name in RELEASE_INPUTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    r = _release(tmp_path, "--dry-run")
    assert r.returncode == 1 and "not a git checkout" in r.stderr, r.stderr
