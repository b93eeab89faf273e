"""kube-proxy's feature gates in nftproxy: their defaults follow the cluster's version (the
apiserver's /version), --feature-gates overrides them as kube-proxy's flag does, and the table
follows: KubeProxyNFTablesLocalhostNodePorts off at 1.37, on at 1.38."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from nftproxy.cli import build_parser
from nftproxy.cli.flags import config_from_args, settings_from_args
from nftproxy.compiler import features, names
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support import syncer as support

GATE = features.LOCALHOST_NODEPORTS
ROOT = Path(__file__).resolve().parents[2]


def version(git: str) -> dict[str, str]:
    major, minor = git.lstrip("v").split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": git}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("v1.38.0-beta.0", (1, 38)),
        ("v1.37.2", (1, 37)),
        ("v1.35.4-gke.1", (1, 35)),
        ("1.38", (1, 38)),
        ("v1.38.0+k3s1", (1, 38)),
    ],
)
def test_versions_are_read_as_the_release_says(text: str, expected: tuple[int, int]) -> None:
    assert features.parse_version(text) == expected


def test_the_version_comes_from_git_version_else_major_and_minor() -> None:
    assert features.server_version(version("v1.38.0-beta.0")) == "v1.38.0-beta.0"
    assert features.server_version({"major": "1", "minor": "28+", "gitVersion": "unknown"}) == "v1.28"
    with pytest.raises(ValueError):
        features.server_version({"major": "", "minor": ""})


def test_localhost_nodeports_default_follows_the_release() -> None:
    """Alpha, off, in 1.37; beta, on, in 1.38 (pkg/features of each release); off before it
    existed, and off without a cluster to ask."""
    assert [features.default(GATE, (1, m)) for m in (35, 36, 37, 38, 39)] == [False, False, False, True, True]
    assert features.default(GATE, None) is False
    assert features.enabled((1, 38), {}) == {GATE}
    assert features.enabled((1, 37), {}) == frozenset()


def test_feature_gates_override_the_default_both_ways() -> None:
    assert features.enabled((1, 37), {GATE: True}) == {GATE}
    assert features.enabled((1, 38), {GATE: False}) == frozenset()
    assert "default at 1.38" in features.describe((1, 38), {})
    assert f"{GATE}=false (--feature-gates)" in features.describe((1, 38), {GATE: False})


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("NoSuchGate=true", "unrecognized feature gate 'NoSuchGate'"),
        (f"{GATE}=yes", "want true or false"),
        (GATE, "want true or false"),
    ],
)
def test_a_bad_feature_gate_is_refused_with_its_reason(text: str, error: str) -> None:
    with pytest.raises(features.FeatureGateError, match=error):
        features.parse_gates(text)


def test_the_flag_as_kube_proxy_spells_it() -> None:
    assert features.parse_gates(f" {GATE}=True ,") == {GATE: True}
    args = build_parser().parse_args(["run", "--node-name", "n1", "--feature-gates", f"{GATE}=false"])
    assert settings_from_args(args).feature_gates == {GATE: False}
    # render and apply ask no cluster: the gates are off unless the flag turns them on
    assert config_from_args(build_parser().parse_args(["render", "-f", "-"])).enabled_gates == frozenset()
    on = build_parser().parse_args(["render", "-f", "-", "--feature-gates", f"{GATE}=true"])
    assert config_from_args(on).enabled_gates == {GATE}


def test_a_bad_flag_fails_the_command_in_one_line() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "nftproxy", "render", "-f", "/dev/null", "--feature-gates", "Nope=true"],
        capture_output=True, text=True, check=False, env=env, timeout=60,
    )  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"nftproxy: --feature-gates: unrecognized feature gate 'Nope' (nftproxy knows: {GATE})"
    ]


def _synced_rejects(server: str | None, overrides: dict[str, bool]) -> Mapping[tuple[str, ...], object] | None:
    """The localhost reject map of the IPv4 table after a sync with a NodePort Service, the
    apiserver at ``server`` (None: not read), --feature-gates ``overrides``."""
    syncer, fake = support.make(feature_gates=overrides)

    async def go() -> None:
        svc = k.service("web", ["10.96.0.10"], [k.port(80, "http", node_port=30080)], type="NodePort")
        syncer.changes.service_changed("default/web", svc)
        if server is not None:
            syncer.changes.server_version(version(server))
        syncer.changes.mark_loaded()
        await syncer.sync_once()

    asyncio.run(go())
    return fake.tables[(Family.IP, "nftproxy")].elements.get(names.LOCALHOST_NODEPORT_REJECT_PORTS)


def test_the_operator_follows_the_apiservers_version() -> None:
    """`run` on a 1.38 cluster rejects localhost NodePorts (no `localhost` asked: all
    protocols); on a 1.37 cluster it leaves them alone; --feature-gates wins either way."""
    on = _synced_rejects("v1.38.0-beta.0", {})
    assert on is not None and set(on) == {("tcp", "30080")}
    assert _synced_rejects("v1.37.2", {}) is None
    assert _synced_rejects("v1.37.2", {GATE: True}) is not None
    assert _synced_rejects("v1.38.0", {GATE: False}) is None


def test_an_unreadable_version_leaves_the_flags_gates(caplog: pytest.LogCaptureFixture) -> None:
    """Never expected of an apiserver; the proxy goes on with --feature-gates alone, and says so."""
    syncer, _ = support.make()
    syncer.changes.server_version({"major": "", "minor": "", "gitVersion": "unknown"})
    assert syncer.changes.version is None
    assert "unreadable" in caplog.text
