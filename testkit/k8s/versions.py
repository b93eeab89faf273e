"""The Kubernetes versions of hack/k8s-versions.sh (the one list, also sourced by the hack/
scripts), and where each version's binaries are.

``K8S_VERSION`` in the environment picks the version the tests, the demo and the real cluster
use (``K8S_VERSION=v1.38.0-beta.0 make test``); without it, ``K8S_DEFAULT``. Each version's
Kubernetes binaries live in ``$NFTPROXY_CACHE/k8s/<version>/bin`` (hack/k8s-tools.sh,
hack/e2e-tools.sh); helm and CoreDNS, tied to no version, in ``$NFTPROXY_CACHE/bin``.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parents[2] / "hack" / "k8s-versions.sh"
# built per Kubernetes version (the others, helm and coredns, are not)
VERSIONED = frozenset(
    {
        "kube-apiserver",
        "kubectl",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kube-proxy",
        "e2e.test",
        "agnhost",
        "regression-issue-74839",
    }
)
_LINE = re.compile(r"^([A-Z0-9_]+)=(\S+)")


@cache
def read(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """NAME -> version of every ``NAME=VALUE`` line (a value ``$NAME`` is that earlier line's)."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        m = _LINE.match(raw.strip())
        if not m:
            continue
        name, value = m.groups()
        if value.startswith("$"):
            if value[1:] not in out:
                raise ValueError(f"{path}: {name}={value}: no earlier {value[1:]}")
            value = out[value[1:]]
        out[name] = value
    return out


def default() -> str:
    return read()["K8S_DEFAULT"]


def oldest() -> str:
    return read()["K8S_OLDEST"]


def newest() -> str:
    """The newest minor release of the list (``K8S_1_<minor>``)."""
    minors = {int(n.rsplit("_", 1)[1]): v for n, v in read().items() if re.fullmatch(r"K8S_1_\d+", n)}
    return minors[max(minors)]


def current() -> str:
    """The version in use: ``K8S_VERSION``, else ``K8S_DEFAULT``."""
    return os.environ.get("K8S_VERSION") or default()


def minor(version: str) -> int:
    """``v1.38.0-beta.0`` -> 38."""
    m = re.match(r"^v?1\.(\d+)", version)
    if not m:
        raise ValueError(f"not a Kubernetes 1.x version: {version!r}")
    return int(m.group(1))


def bin_dir(cache_dir: Path, version: str | None = None) -> Path:
    """Where that version's Kubernetes binaries are (default: the version in use)."""
    return cache_dir / "k8s" / (version or current()) / "bin"
