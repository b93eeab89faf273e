"""`nftproxy run --service-counters` against a real kube-apiserver: real connections to a Service's
ClusterIP and NodePort, and to a Service without endpoints, counted on the operator's own
/metrics; a Service deleted takes its series with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s", "--service-counters")
HTTP = [k.port(8080, "http")]


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    pods: list[Pod]
    ext: Client

    def probe(self, src: Node | Pod | Client, dest: str, port: int, count: int = 1) -> list[str]:
        return [r.pod or str(r.error) for r in self.cl.lab.probe(src, "tcp", dest, port, count=count, timeout=1.0)]

    def series(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        code, text = self.cl.http_get(self.node, 10249, "/metrics")
        assert code == 200
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text)
            if fam.name.startswith("nftproxy_service_")
            for s in fam.samples
            if s.name.endswith("_total")
        }


def key(metric: str, service: str, kind: str, **extra: str) -> tuple[str, frozenset[tuple[str, str]]]:
    labels = {"namespace": "counted", "service": service, "port": "http", "protocol": "TCP", "kind": kind}
    return f"nftproxy_service_{metric}_total", frozenset({**labels, "ip_family": "IPv4", **extra}.items())


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale("ct")
    with NetLab("ct") as lab:
        cl = LocalCluster(control_plane, lab, tmp_path_factory.mktemp("counters"))
        try:
            node = cl.add_node("counted-node", 1)
            pods = [lab.add_pod(node, f"p{i}", tcp=(8080,), udp=()) for i in range(2)]
            ext = lab.add_client("ext", 100, via=node)
            cl.start_proxy(node, *FLAGS)
            eventually(lambda: cl.proxy_status(node).get("status", {}).get("syncs"), what="first sync")
            yield Env(cl, node, pods, ext)
        finally:
            cl.close()


def test_the_operators_metrics_count_real_connections_per_service_port(env: Env) -> None:
    ns = env.cl.namespace("counted")
    eps = [k.endpoint(p.ipv4, node="counted-node") for p in env.pods]
    env.cl.apply(
        k.service("web", ["10.96.11.10"], [k.port(80, "http", node_port=30911)], type="NodePort", namespace=ns),
        k.endpoint_slice("web-abc", "web", eps, HTTP, namespace=ns),
        k.service("empty", ["10.96.11.20"], [k.port(80, "http")], namespace=ns),
    )
    eventually(lambda: env.probe(env.node, "10.96.11.10", 80)[0] in ("p0", "p1"), what="web served")
    eventually(lambda: env.probe(env.node, "10.96.11.20", 80) == ["refused"], what="empty rejected")
    before = env.series()
    assert env.probe(env.node, "10.96.11.10", 80, 6).count("refused") == 0  # the node's own connections
    assert env.probe(env.ext, env.node.ipv4, 30911, 4).count("refused") == 0
    assert env.probe(env.node, "10.96.11.20", 80, 3) == ["refused"] * 3
    after = env.series()

    def grew(k_: tuple[str, frozenset[tuple[str, str]]]) -> float:
        return after[k_] - before[k_]

    assert grew(key("connections", "web", "ClusterIP")) == 6
    assert grew(key("connections", "web", "NodePort")) == 4
    assert 7 * 6 <= grew(key("packets", "web", "ClusterIP")) <= 14 * 6
    assert grew(key("bytes", "web", "NodePort")) >= 52 * 7 * 4
    assert grew(key("no_endpoint_packets", "empty", "ClusterIP", verdict="reject")) == 3

    env.cl.delete("service", "empty", ns)
    eventually(
        # by namespace too: the control plane is shared, and other modules have Services named "empty"
        lambda: not any((dict(ls)["namespace"], dict(ls)["service"]) == (ns, "empty") for _, ls in env.series()),
        what="the deleted Service's series gone",
    )
    assert key("connections", "web", "ClusterIP") in env.series()
