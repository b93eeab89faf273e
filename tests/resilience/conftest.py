"""Churn, crash and outage runs: each test gets a control plane of its own (they stop its parts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.controlplane import ControlPlane
from testkit.netlab import cleanup_stale
from tests.controlplanes import started_control_plane


@pytest.fixture
def own_control_plane() -> Iterator[ControlPlane]:
    cleanup_stale("vf")
    yield from started_control_plane()
