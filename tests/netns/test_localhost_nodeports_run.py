"""`nftproxy run --nodeport-addresses primary,localhost` (gate KubeProxyNFTablesLocalhostNodePorts
on) against a real control plane: the operator serves a TCP NodePort on its node namespace's
127.0.0.1 after its syncs, follows the EndpointSlice (its last endpoint gone: no listener,
refused), rejects a UDP NodePort on loopback, and exports kube-proxy's localhost NodePort metrics.
Without flags the gate follows the control plane's version (off at 1.37, on at 1.38: every
protocol's localhost NodePorts rejected and counted). The pieces alone, without the API:
tests/netns/test_localhost_nodeports.py. (The NodePorts are bound in the lab node's namespace
only, on its loopback.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nftproxy.compiler import features
from testkit.k8s import objects as k
from testkit.k8s import versions
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.kubeproxy import http_get_in, parse_metrics
from testkit.lab.netlab import NetLab, Node, cleanup_stale
from tests.support.controlplanes import started_control_plane

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

WEB, DNS = 30480, 30453
METRICS = 10249


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cleanup_stale("lhnp-")
    for cp in started_control_plane():
        with NetLab("lhnp-") as lab:
            cl = LocalCluster(cp, lab, tmp_path)
            try:
                yield cl
            finally:
                cl.close()


def first(cl: LocalCluster, node: Node, proto: str, port: int) -> str:
    r = cl.lab.probe(node, proto, "127.0.0.1", port, timeout=2.0)[0]
    return str(r.pod) if r.ok else str(r.error)


def metrics(node: Node) -> dict[str, float]:
    status, body = http_get_in(node.netns, node.ipv4, METRICS, "/metrics")
    assert status == 200
    return parse_metrics(body)


def test_run_serves_localhost_nodeports(cluster: LocalCluster) -> None:
    cl = cluster
    node = cl.add_node("lh-node", 1)
    pod = cl.lab.add_pod(node, "web-1", tcp=(8080,), udp=(5353,))
    ns = cl.namespace("lh")
    slice_ = k.endpoint_slice(
        "web-1", "web", [k.endpoint(pod.ipv4, node=node.name)],
        [k.port(8080, "http"), k.port(5353, "dns", "UDP")], namespace=ns,
    )  # fmt: skip
    cl.apply(
        k.service(
            "web", ["10.96.48.10"],
            [k.port(80, "http", node_port=WEB), k.port(53, "dns", "UDP", node_port=DNS)],
            namespace=ns, type="NodePort",
        ),
        slice_,
    )  # fmt: skip
    cl.start_proxy(
        node, "--min-sync-period", "0", "--nodeport-addresses", "primary,localhost",
        "--feature-gates", f"{features.LOCALHOST_NODEPORTS}=true",
    )  # fmt: skip
    eventually(lambda: first(cl, node, "tcp", WEB) == "web-1", timeout=60, what="the localhost NodePort served")
    assert first(cl, node, "udp", DNS) == "refused"  # UDP on loopback: rejected
    assert cl.lab.probe(node, "udp", node.ipv4, DNS)[0].pod == "web-1"  # on the node's IP: DNATed

    m = metrics(node)
    assert m['kubeproxy_nftables_localhost_nodeport_listeners{ip_family="IPv4"}'] == 1
    assert m['kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family="IPv4",protocol="UDP"}'] >= 1
    assert m['nftproxy_localhost_nodeport_connections_total{ip_family="IPv4"}'] >= 1

    # the endpoint goes away: the listener closes (refused), as upstream
    slice_["endpoints"] = []
    cl.apply(slice_)
    eventually(lambda: first(cl, node, "tcp", WEB) == "refused", timeout=30, what="no endpoint: refused")
    assert metrics(node)['kubeproxy_nftables_localhost_nodeport_listeners{ip_family="IPv4"}'] == 0
    assert "Traceback" not in cl.proxy_log(node)


def test_without_flags_the_gate_follows_the_control_planes_version(cluster: LocalCluster) -> None:
    """No --feature-gates, no ``localhost``: on a 1.38 control plane the gate is on (its default)
    and a TCP NodePort on 127.0.0.1 is rejected and counted, as kube-proxy 1.38's; on 1.37 it is
    off (no rule, no metric), as kube-proxy 1.37's."""
    cl = cluster
    node = cl.add_node("gate-node", 1)
    pod = cl.lab.add_pod(node, "web-1", tcp=(8080,), udp=())
    ns = cl.namespace("gate")
    cl.apply(
        k.service("web", ["10.96.48.20"], [k.port(80, "http", node_port=WEB)], namespace=ns, type="NodePort"),
        k.endpoint_slice("web-1", "web", [k.endpoint(pod.ipv4, node=node.name)], [k.port(8080, "http")], namespace=ns),
    )  # fmt: skip
    cl.start_proxy(node, "--min-sync-period", "0")
    eventually(lambda: cl.lab.probe(node, "tcp", node.ipv4, WEB)[0].pod == "web-1", timeout=60, what="the NodePort")
    on = versions.minor(versions.current()) >= 38
    assert first(cl, node, "tcp", WEB) == "refused"  # rejected (1.38), or nothing listens there (1.37)
    rejected = 'kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family="IPv4",protocol="TCP"}'
    m = metrics(node)
    if on:
        assert m[rejected] >= 1
    else:
        assert rejected not in m
    assert ("Kubernetes " + versions.current()) in cl.proxy_log(node)
