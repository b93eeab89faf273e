"""Fixtures for tests against a real control plane (etcd + kube-apiserver on 127.0.0.1).

Needs the binaries built by hack/k8s-tools.sh (and Debian's etcd-server). Run with
``.venv/bin/pytest -m k8s tests/k8s``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.k8s.controlplane import ControlPlane
from tests.support.controlplanes import started_control_plane


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """One started control plane for the whole session; stopped (no process left) at the end."""
    yield from started_control_plane()
