"""Where the Kubernetes binaries and etcd are found (the k8s-tools cache, ``$NFTPROXY_BIN``, ``$PATH``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from testkit.k8s import versions
from testkit.k8s.controlplane.errors import ControlPlaneError


def cache_dir() -> Path:
    return Path(os.environ.get("NFTPROXY_CACHE") or Path.home() / ".cache" / "nftproxy")


def find_binary(name: str, version: str | None = None) -> Path:
    """Locate NAME in $NFTPROXY_BIN, the k8s-tools cache (a Kubernetes binary: in its version's
    directory, ``version`` or else K8S_VERSION's, testkit/k8s/versions.py), then (etcd only) $PATH."""
    candidates: list[Path] = []
    if env_bin := os.environ.get("NFTPROXY_BIN"):
        candidates.append(Path(env_bin) / name)
    if name in versions.VERSIONED:
        candidates.append(versions.bin_dir(cache_dir(), version) / name)
    else:
        candidates.append(cache_dir() / "bin" / name)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    if name == "etcd" and (found := shutil.which("etcd")):
        return Path(found)
    hint = (
        "install Debian's etcd-server (hack/install.sh)"
        if name == "etcd"
        else f"run K8S_VERSION={version or versions.current()} hack/k8s-tools.sh (or hack/e2e-tools.sh) to build it"
    )
    raise ControlPlaneError(
        f"{name} not found (looked in {', '.join(str(c) for c in candidates)}): {hint}, "
        "or point NFTPROXY_BIN at a directory that has it"
    )
