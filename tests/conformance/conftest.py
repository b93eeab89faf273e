"""The differential suite's fixtures, and its table printed at the end of the pytest run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from testkit.k8s.controlplane import ControlPlane, ControlPlaneError, find_binary
from tests.conformance.harness import REPORT, lax_validation
from tests.support.controlplanes import started_control_plane

# The address spellings an apiserver before 1.36 stored (leading zeros, IPv4-mapped IPv6, host bits:
# cases.address_spelling_cases) exist in clusters upgraded since, and in 1.36+ clusters with this
# Beta gate turned off; v1.37.2 with it off validates them as v1.35 did (a real apiserver writes
# them: nothing goes straight into etcd). Every other case is valid under the strict rules too.
# From 1.38 the gate is locked on (cases.LAX_VALIDATION_UNTIL): the legacy cases are left out.
LEGACY_VALIDATION = "--feature-gates=StrictIPCIDRValidation=false"


@pytest.fixture(scope="module")
def conformance_control_plane() -> Iterator[ControlPlane]:
    yield from started_control_plane(extra_apiserver_args=[LEGACY_VALIDATION] if lax_validation() else [])


def kube_proxy_version() -> str:
    """``Kubernetes v1.X.Y`` of the kube-proxy the suite compares with (NFTPROXY_BIN / NFTPROXY_CACHE)."""
    try:
        argv = [str(find_binary("kube-proxy")), "--version"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (ControlPlaneError, OSError, subprocess.TimeoutExpired):
        return "kube-proxy (version unknown)"
    return out.stdout.strip() or "kube-proxy (version unknown)"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORT.rows:
        return
    table = REPORT.table()
    terminalreporter.section(f"kube-proxy vs nftproxy (tests/conformance; reference: {kube_proxy_version()})")
    terminalreporter.write_line(table)
    out = os.environ.get("NFTPROXY_CONFORMANCE_TABLE")
    if out:
        with open(out, "w") as f:
            f.write(table + "\n")
