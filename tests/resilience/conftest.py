"""Churn, crash and outage runs: each test gets a control plane of its own (they stop its parts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.controlplane import ControlPlane, ControlPlaneError
from testkit.netlab import cleanup_stale


@pytest.fixture
def own_control_plane() -> Iterator[ControlPlane]:
    cleanup_stale("vf")
    cp = ControlPlane()
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()
