"""Churn, crash and outage runs: each test gets a control plane of its own (they stop its parts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import cleanup_stale
from tests.support.controlplanes import started_control_plane


@pytest.fixture
def own_control_plane() -> Iterator[ControlPlane]:
    cleanup_stale("vf")
    yield from started_control_plane()
