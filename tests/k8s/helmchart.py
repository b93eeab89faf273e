"""Running the nftproxy Helm chart (charts/nftproxy) in tests: helm, releases, the chart's identity.

``Helm`` runs the helm binary built by hack/k8s-tools.sh with its cache/config/data in a private
directory (never the user's ~/.config/helm) and, when given one, the control plane's kubeconfig.
``Release.token()`` is a service-account token of the release's ServiceAccount (TokenRequest), for
acting as the chart's nftproxy.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testkit.k8s import versions
from testkit.k8s.controlplane import ControlPlane, find_binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "nftproxy"
# `helm template` (offline) renders for Kubernetes v1.20 unless told: the chart's kubeVersion
# (>= 1.35) refuses that, so offline renders name the pinned version
KUBE_VERSION = versions.current().removeprefix("v")
CHART_NAME = "nftproxy"

Obj = dict[str, Any]


class HelmError(subprocess.CalledProcessError):
    """A helm command failed; str() includes its output."""

    def __str__(self) -> str:
        out = "\n".join(s.strip() for s in (self.stdout or "", self.stderr or "") if s.strip())
        return f"{super().__str__()}\n{out}" if out else super().__str__()


def set_args(values: Mapping[str, str] | Iterable[str] = ()) -> list[str]:
    """``{"a.b": "x"}`` or ``["a.b=x"]`` as helm ``--set`` arguments."""
    pairs = [f"{k}={v}" for k, v in values.items()] if isinstance(values, Mapping) else list(values)
    return [arg for pair in pairs for arg in ("--set", pair)]


class Helm:
    def __init__(self, home: Path, kubeconfig: Path | None = None) -> None:
        self.bin = find_binary("helm")
        home.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            # Offline helm (lint/template) must not read the user's cluster by accident.
            "KUBECONFIG": str(kubeconfig or home / "no-kubeconfig"),
        }

    def __call__(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bin), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise HelmError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def template(
        self,
        values: Mapping[str, str] | Iterable[str] = (),
        *,
        release: str = "np",
        namespace: str = "kube-system",
        tests: bool = False,
    ) -> list[Obj]:
        """The chart rendered (offline) as a list of objects; ``tests``: with the `helm test` hooks."""
        skip = [] if tests else ["--skip-tests"]
        out = self(
            "template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION, *skip,
            *set_args(values),
        ).stdout  # fmt: skip
        return [d for d in yaml.safe_load_all(out) if d]


def find(objs: Iterable[Obj], kind: str) -> Obj:
    found = [o for o in objs if o.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


@dataclass
class Release:
    """An installed release of the chart in the control plane."""

    control_plane: ControlPlane
    helm: Helm
    name: str
    namespace: str

    @property
    def fullname(self) -> str:
        return self.name if CHART_NAME in self.name else f"{self.name}-{CHART_NAME}"

    @property
    def service_account(self) -> str:
        return self.fullname

    def token(self, duration: str = "30m") -> str:
        """A bound token of the release's ServiceAccount (TokenRequest API)."""
        return self.control_plane.kubectl(
            "create", "token", self.service_account, "-n", self.namespace, f"--duration={duration}"
        ).stdout.strip()

    def token_kubeconfig(self, path: Path) -> Path:
        return self.control_plane.token_kubeconfig(self.token(), path)

    def uninstall(self) -> None:
        self.helm("uninstall", self.name, "--namespace", self.namespace, check=False)


def install(
    control_plane: ControlPlane,
    helm: Helm,
    name: str,
    namespace: str,
    values: Mapping[str, str] | Iterable[str] = (),
) -> Release:
    """``helm install NAME charts/nftproxy`` into NAMESPACE (created if missing). No --wait: the
    test control plane runs no controllers, so the DaemonSet never gets pods.

    The node-bound identity policy is off here: these tests use TokenRequest tokens bound to no
    pod or node, which it refuses (tests/e2e checks it with real pods' tokens)."""
    helm(
        "install", name, str(CHART), "--namespace", namespace, "--create-namespace",
        "--set", "nodeBoundIdentity.enabled=false", *set_args(values),
    )  # fmt: skip
    return Release(control_plane, helm, name, namespace)
