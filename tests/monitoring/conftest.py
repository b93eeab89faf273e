"""The tools of tests/monitoring: helm (offline: template) and promtool (hack/prom-tools.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.k8s.controlplane import ControlPlaneError, find_binary
from tests.k8s.helmchart import Helm


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        return Helm(tmp_path_factory.mktemp("helm"))
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return find_binary("promtool")
    except ControlPlaneError as e:
        pytest.fail(f"{e} (hack/prom-tools.sh builds it)", pytrace=False)
