"""The healthCheckNodePort server listens where NodePorts are accepted, as kube-proxy's: on the
node's primary IPs by default, on the node's addresses inside --nodeport-addresses (each
family's wildcard for a /0: tests/unit/test_health_check_addresses.py); never on the node's
other addresses (the pods' gateway here). A Node's new address is bound, its old one closed,
without a restart.

`nftproxy run` against a real control plane, serving in a lab node's namespace; the client is a
socket opened in that namespace, towards each of the node's own addresses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.kubeproxy import http_get_in
from testkit.lab.netlab import NetLab, Node, cleanup_stale
from tests.support.controlplanes import started_control_plane

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

HC = 32440
NEW4 = "198.18.0.211"  # the node's second address (its InternalIP after the update)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cleanup_stale("vh")
    for cp in started_control_plane():
        with NetLab("vh") as lab:
            cl = LocalCluster(cp, lab, tmp_path)
            try:
                yield cl
            finally:
                cl.close()


def answer(node: Node, host: str) -> str:
    """What the health port says on one address: the HTTP status and kube-proxy's JSON, or the
    error (refused: nothing listens there)."""
    try:
        status, body = http_get_in(node.netns, host, HC, "/", timeout=2.0)
    except OSError as e:
        return type(e).__name__
    doc = json.loads(body)
    return f"{status} {doc['service']['namespace']}/{doc['service']['name']} localEndpoints={doc['localEndpoints']}"


def setup(cl: LocalCluster, *flags: str) -> Node:
    node = cl.add_node("hc-node", 1)
    pod = cl.lab.add_pod(node, "web-1", tcp=(8080,), udp=())  # the pods' gateway is one of the node's addresses
    cl.lab.exec(node, "ip", "addr", "add", f"{NEW4}/32", "dev", "eth0")  # one more address, not a node IP yet
    ns = cl.namespace("hc")
    cl.apply(
        k.service(
            "web",
            ["10.96.44.10"],
            [k.port(80, "http", node_port=30440)],
            namespace=ns,
            type="LoadBalancer",
            lb_ips=["198.19.44.10"],
            externalTrafficPolicy="Local",
            healthCheckNodePort=HC,
        ),
        k.endpoint_slice("web-1", "web", [k.endpoint(pod.ipv4, node=node.name)], [k.port(8080, "http")], namespace=ns),
    )
    cl.start_proxy(node, "--min-sync-period", "0", *flags)
    return node


OK = "200 hc/web localEndpoints=1"


def test_health_port_on_the_primary_ips_only_and_rebound_on_node_update(cluster: LocalCluster) -> None:
    cl = cluster
    node = setup(cl)
    eventually(lambda: answer(node, node.ipv4) == OK, timeout=30, what="the health port on the node's IPv4")
    # An IPv4-only Service: no listener on the IPv6 primary IP either (kube-proxy's IPv6 proxier
    # does not have the Service).
    assert answer(node, node.ipv6) == "ConnectionRefusedError"
    # The node's other addresses: nothing listens (kube-proxy's nodePortAddresses "primary").
    assert answer(node, node.gateway4) == "ConnectionRefusedError"
    assert answer(node, node.gateway6) == "ConnectionRefusedError"
    assert answer(node, NEW4) == "ConnectionRefusedError"

    # The Node's IPv4 becomes NEW4: the listener moves there, the old address closes.
    addresses = [
        {"type": "InternalIP", "address": NEW4},
        {"type": "InternalIP", "address": node.ipv6},
        {"type": "Hostname", "address": node.name},
    ]
    patch = json.dumps({"status": {"addresses": addresses}})
    cl.cp.kubectl("patch", "node", node.name, "--subresource=status", "--type=merge", "-p", patch)
    assert cl.get("node", node.name)["status"]["addresses"] == addresses
    eventually(lambda: answer(node, NEW4) == OK, timeout=30, what="the health port on the Node's new address")
    eventually(lambda: answer(node, node.ipv4) == "ConnectionRefusedError", timeout=10, what="the old address closed")
    assert answer(node, node.gateway4) == "ConnectionRefusedError"


def test_health_port_on_the_nodeport_addresses_cidrs(cluster: LocalCluster) -> None:
    """--nodeport-addresses: the node's addresses inside the CIDRs, and only those."""
    cl = cluster
    node = setup(cl, "--nodeport-addresses", "10.244.0.0/16")
    eventually(lambda: answer(node, node.gateway4) == OK, timeout=30, what="the health port on the pods' gateway")
    assert answer(node, node.ipv4) == "ConnectionRefusedError"
    assert answer(node, NEW4) == "ConnectionRefusedError"
