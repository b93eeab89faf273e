"""The chart's least-privilege identity is enough to run the proxy for real: `nftproxy run` with a
TokenRequest token of the chart's ServiceAccount syncs a node and writes its ProxyStatus and Events."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, cleanup_stale
from tests.k8s.helmchart import Helm, Release, install

pytestmark = [pytest.mark.k8s, pytest.mark.netns]


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    helm = Helm(tmp_path_factory.mktemp("helm-id"), control_plane.kubeconfig)
    rel = install(control_plane, helm, f"id-{uuid.uuid4().hex[:5]}", f"nftproxy-id-{uuid.uuid4().hex[:5]}")
    try:
        yield rel
    finally:
        rel.uninstall()


def test_nftproxy_runs_with_the_charts_service_account(
    control_plane: ControlPlane, release: Release, tmp_path: Path
) -> None:
    kubeconfig = release.token_kubeconfig(tmp_path / "sa.kubeconfig")
    cleanup_stale()
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, tmp_path)
        try:
            node = cl.add_node("rbac-node", 1)
            pod = lab.add_pod(node, "p", tcp=(8080,))
            ns = cl.namespace("rbac-test")
            cl.apply(
                k.service("svc", ["10.96.2.10"], [k.port(80, "http")], namespace=ns),
                k.endpoint_slice("svc-x", "svc", [k.endpoint(pod.ipv4)], [k.port(8080, "http")], namespace=ns),
                k.endpoint_slice("orphan-x", "orphan", [k.endpoint(pod.ipv4)], [k.port(8080)], namespace=ns),
            )
            cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "0.5s", kubeconfig=kubeconfig)
            # it lists and watches with that identity: the Service works
            eventually(lambda: {r.pod for r in lab.probe(node, "tcp", "10.96.2.10", 80)} == {"p"}, what="svc served")
            # it writes its ProxyStatus (create + status patch) and an Event for the orphan slice
            st = eventually(lambda: cl.proxy_status(node).get("status", {}).get("skippedCount"), what="ProxyStatus")
            assert st >= 1

            def event() -> list[str] | None:
                items = json.loads(control_plane.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
                return [e["reason"] for e in items if e["involvedObject"]["name"] == "orphan-x"] or None

            assert eventually(event, what="Event for the orphan slice") == ["InvalidObject"]
            log = cl.proxy_log(node)
            assert "Forbidden" not in log and "Traceback" not in log, log[-3000:]  # ("403": also in timestamps)
        finally:
            cl.close()
