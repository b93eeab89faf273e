"""The differential suite's fixtures, and its table printed at the end of the pytest run."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testkit.k8s.controlplane import ControlPlane
from tests.conformance.harness import REPORT
from tests.support.controlplanes import started_control_plane


@pytest.fixture(scope="module")
def conformance_control_plane() -> Iterator[ControlPlane]:
    yield from started_control_plane()


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
