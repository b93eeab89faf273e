"""The one way the test suites start a control plane of their own (etcd + kube-apiserver)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.k8s.controlplane import ControlPlane, ControlPlaneError


def started_control_plane(*, audit: bool = False) -> Iterator[ControlPlane]:
    """For a fixture: ``yield from started_control_plane()``; stopped (no process left) after.
    ``audit``: the apiserver logs every request (ControlPlane.read_audit_log)."""
    cp = ControlPlane(audit=audit)
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
