"""The real cluster of the end-to-end tests: testkit.realcluster, two kubelet nodes, started once.

The first run on a machine builds the images (hack/images.sh, cached after). The cluster is
removed at the end, also when a test fails; a cluster left by a session that was killed is
removed by the next one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.realcluster import RealCluster, stale_clusters

MACHINE_SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward")


def machine_sysctls() -> dict[str, str]:
    return {k: Path(f"/proc/sys/{k}").read_text().strip() for k in MACHINE_SYSCTLS}


@pytest.fixture(scope="session")
def sysctls_before() -> dict[str, str]:
    return machine_sysctls()


@pytest.fixture(scope="session")
def cluster(sysctls_before: dict[str, str]) -> Iterator[RealCluster]:
    if name := os.environ.get("NFTPROXY_E2E_CLUSTER"):
        # Development: a cluster made with `python -m testkit.realcluster up --name NAME`, kept.
        yield RealCluster.attach(name)
        return
    for name in stale_clusters():
        RealCluster.attach(name).down()
    c = RealCluster(f"e2e{os.getpid()}", log=lambda s: print(s, flush=True))
    try:
        c.up()
    except Exception as e:
        pytest.fail(f"the cluster did not come up: {e}", pytrace=False)
    try:
        yield c
    finally:
        c.down()
