"""Upstream's own e2e suite on the real cluster with nftproxy as the only Service proxy: every
`[sig-network]` `[Conformance]` test of `e2e.test` at the pinned Kubernetes version, and
"KubeProxy should set TCP CLOSE_WAIT timeout" (the node's conntrack timeouts, as kube-proxy sets
them) (the full selection runs under `make upstream-e2e`; testkit.realcluster.upstream).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.realcluster import RealCluster, upstream

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]
ROOT = Path(__file__).resolve().parents[2]


def test_upstream_sig_network_conformance_passes(cluster: RealCluster) -> None:
    log = cluster.log
    upstream.prepare(cluster, "nftproxy", log)
    report = ROOT / "_output" / "upstream-e2e" / "make-test"
    cases = upstream.run_e2e(cluster, "make-test", report, log)
    print(upstream.table(cases))
    print(upstream.summary_line(cases))
    ran = [c for c in cases if c.result != "skipped"]
    assert len(ran) >= 40, upstream.summary_line(cases)  # the selection really ran (48 in v1.37)
    assert any("CLOSE_WAIT" in c.name and c.result == "passed" for c in cases), upstream.summary_line(cases)
    failed = [f"{c.name}: {c.message}" for c in cases if c.result == "failed"]
    assert not failed, "\n".join(failed)
