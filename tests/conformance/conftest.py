"""The differential suite's fixtures, and its table printed at the end of the pytest run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testkit.controlplane import ControlPlane, ControlPlaneError
from tests.conformance.harness import REPORT


@pytest.fixture(scope="module")
def conformance_control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    try:
        yield cp
    finally:
        cp.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORT.rows:
        return
    table = REPORT.table()
    terminalreporter.section("kube-proxy vs nftproxy (tests/conformance)")
    terminalreporter.write_line(table)
    out = os.environ.get("NFTPROXY_CONFORMANCE_TABLE")
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")
