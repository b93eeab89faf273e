"""The one way the test suites start a control plane of their own (etcd + kube-apiserver)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from testkit.k8s import versions
from testkit.k8s.controlplane import ControlPlane, ControlPlaneError, cache_dir

OLDEST = versions.oldest()  # the oldest Kubernetes the chart claims (Chart.yaml kubeVersion), hack/test.sh builds it
NEWEST = versions.newest()  # the newest it claims


def _wait_for_background_builds(timeout: float = 1800.0) -> None:
    """hack/test.sh builds the other apiservers beside the tests: their exit status lands in
    ``$NFTPROXY_APISERVER_BUILDS/rc`` (the log beside it). Waits for it; fails with the log's
    tail when the build failed."""
    builds = os.environ.get("NFTPROXY_APISERVER_BUILDS")
    if not builds:
        return
    rc, log = Path(builds) / "rc", Path(builds) / "log"
    deadline = time.monotonic() + timeout
    while not rc.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"the apiserver builds of hack/test.sh did not finish in {timeout:.0f} s ({log})")
        time.sleep(2)
    if rc.read_text().strip() != "0":
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.is_file() else ""
        pytest.fail(f"the apiserver builds of hack/test.sh failed ({log}):\n{tail}", pytrace=False)


def apiserver_of(version: str) -> Path:
    """The kube-apiserver of that version (hack/test.sh builds the oldest and the newest the chart
    claims); fails the test, with the command, when it is missing."""
    _wait_for_background_builds()
    path = versions.bin_dir(cache_dir(), version) / "kube-apiserver"
    stamp = path.parent / ".kube-apiserver.version"
    if not path.is_file() or not stamp.is_file() or stamp.read_text().strip() != version:
        pytest.fail(
            f"no kube-apiserver {version} at {path}: K8S_VERSION={version} K8S_TOOLS=kube-apiserver K8S_NO_HELM=1 "
            "bash hack/k8s-tools.sh (hack/test.sh runs it)",
            pytrace=False,
        )
    return path


def oldest_apiserver() -> Path:
    return apiserver_of(OLDEST)


def started_control_plane(
    *, audit: bool = False, apiserver_bin: Path | None = None, extra_apiserver_args: Sequence[str] = ()
) -> Iterator[ControlPlane]:
    """For a fixture: ``yield from started_control_plane()``; stopped (no process left) after.
    ``audit``: the apiserver logs every request (ControlPlane.read_audit_log); ``apiserver_bin``:
    another kube-apiserver than the pinned one (e.g. :func:`oldest_apiserver`);
    ``extra_apiserver_args``: flags of its own (e.g. feature gates)."""
    cp = ControlPlane(audit=audit, apiserver_bin=apiserver_bin, extra_apiserver_args=extra_apiserver_args)
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
