"""The tiers: what each marker needs, and a skip with its reason where that is missing.

`make check` (no root, no apt, no Kubernetes binaries) runs tests/unit and tests/fuzz; the tests
marked below skip there, each saying what it lacks. Under `make test` (root, hack/install.sh,
hack/k8s-tools.sh, hack/prom-tools.sh) nothing here skips. Every test under tests/netns,
tests/k8s, tests/resilience, tests/conformance, tests/e2e and tests/monitoring must carry its
directory's markers (a module's ``pytestmark``): collection fails otherwise, so a new module
cannot run unmarked in the fast tier.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.k8s.controlplane import ControlPlaneError, find_binary

# hack/k8s-tools.sh builds these together into ${NFTPROXY_CACHE:-~/.cache/nftproxy}/k8s/<K8S_VERSION>/bin
# (helm into .../bin).
K8S_TOOLS = ("kube-apiserver", "kubectl", "helm", "kube-proxy")
CLUSTER_TOOLS = ("kubelet", "kube-controller-manager", "kube-scheduler")

Check = Callable[[], str | None]  # None when present, else what is missing


@functools.cache
def _root() -> str | None:
    return None if os.geteuid() == 0 else f"root (running as uid {os.geteuid()})"


@functools.cache
def _ip_netns() -> str | None:
    if shutil.which("ip") is None:
        return "`ip` (iproute2) on PATH"
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False, timeout=10)
    return None if r.returncode == 0 else f"a usable `ip netns` ({r.stderr.strip() or r.returncode})"


@functools.cache
def _nft() -> str | None:
    return None if shutil.which("nft") else "`nft` (nftables) on PATH"


@functools.cache
def _libnftables() -> str | None:
    if importlib.util.find_spec("nftables") is None:
        return "the libnftables Python module (Debian python3-nftables, linked into .venv by hack/install.sh)"
    return None


def _binaries(names: tuple[str, ...], hint: str) -> Check:
    @functools.cache
    def check() -> str | None:
        missing = []
        for name in names:
            try:
                find_binary(name)
            except ControlPlaneError:
                missing.append(name)
        return f"{', '.join(missing)} ({hint})" if missing else None

    return check


@functools.cache
def _containerd() -> str | None:
    return None if shutil.which("containerd") else "`containerd` on PATH (hack/install.sh)"


NEEDS: dict[str, tuple[Check, ...]] = {
    "netns": (_root, _ip_netns, _nft, _libnftables),
    "k8s": (
        _binaries(("etcd",), "Debian's etcd-server, hack/install.sh"),
        _binaries(K8S_TOOLS, "hack/k8s-tools.sh, or NFTPROXY_BIN"),
    ),
    "e2e": (_binaries(CLUSTER_TOOLS, "hack/k8s-tools.sh, or NFTPROXY_BIN"), _containerd),
    "monitoring": (_binaries(("helm", "promtool"), "hack/k8s-tools.sh (helm), hack/prom-tools.sh (promtool)"),),
    "conformance": (),  # also marked k8s and netns
    "resilience": (),  # also marked k8s and netns
}

# The markers every test of a directory carries (what it needs beyond Python).
DIRECTORY_MARKERS: dict[str, tuple[str, ...]] = {
    "netns": ("netns",),
    "k8s": ("k8s",),
    "resilience": ("resilience", "k8s", "netns"),
    "conformance": ("conformance", "k8s", "netns"),
    "e2e": ("e2e", "k8s", "netns"),
    "monitoring": ("monitoring",),
}

TESTS = Path(__file__).resolve().parent


def missing_for(marker: str) -> list[str]:
    return [why for check in NEEDS.get(marker, ()) if (why := check()) is not None]


def _directory(item: pytest.Item) -> str | None:
    try:
        rel = item.path.resolve().relative_to(TESTS)
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) > 1 else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = []
    for item in items:
        markers = {m.name for m in item.iter_markers()}
        want = DIRECTORY_MARKERS.get(_directory(item) or "", ())
        if lacking := [m for m in want if m not in markers]:
            unmarked.append(f"{item.nodeid}: {', '.join(lacking)}")
        reasons = [f"{m}: needs {'; '.join(why)}" for m in sorted(NEEDS) if m in markers and (why := missing_for(m))]
        if reasons:
            item.add_marker(pytest.mark.skip(reason=" | ".join(reasons)))
    if unmarked:
        raise pytest.UsageError(
            "tests without their directory's markers (tests/conftest.py DIRECTORY_MARKERS):\n  " + "\n  ".join(unmarked)
        )


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for marker in sorted(NEEDS):
        why = missing_for(marker)
        if NEEDS[marker]:
            lines.append(f"tier {marker}: " + (f"skipped, needs {'; '.join(why)}" if why else "available"))
    return lines
