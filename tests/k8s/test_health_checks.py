"""`nftproxy run` against a real kube-apiserver: a healthCheckNodePort and /healthz, /livez answer
as kube-proxy v1.37.2's while syncs succeed, while the kernel refuses them, and after.

The refusal is real (the kernel's EBUSY), as in tests/resilience/test_refused.py: a rule appended
to our `services` chain (matching only 192.0.2.255) references `cluster-7`, the chain of the
Service's 7 endpoints. When the Service scales to 6, deleting `cluster-7` is refused at every
sync until the test removes the reference. kube-proxy's rule (healthTimeout 2 x --sync-period,
4 s here): the node turns unhealthy once that change has waited 4 s, every health port then
answers 503 (load balancers drain the node), and 200 again once a sync goes through.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_request_in
from testkit.lab.netlab import NetLab, Node, cleanup_stale

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

HEALTH_TIMEOUT = 4.0  # 2 x --sync-period
FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "2s")
NS = "health"
HC_PORT = 32191
WEIGHT = "X-Load-Balancing-Endpoint-Weight"


@dataclass
class Env:
    cl: LocalCluster
    node: Node

    def ask(self, port: int, path: str = "/", method: str = "GET") -> tuple[int, dict[str, str], str]:
        return http_request_in(self.node.netns, self.node.ipv4, port, path, method, timeout=3.0)


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale()
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, tmp_path_factory.mktemp("health"))
        try:
            node = cl.add_node("hc-node", 1)
            cl.namespace(NS)
            cl.start_proxy(node, *FLAGS)
            eventually(lambda: cl.proxy_status(node).get("status", {}).get("syncs"), what="first sync")
            yield Env(cl, node)
        finally:
            log = cl.proxy_log(node) if cl.proxies else ""
            cl.close()
            if log and "Traceback" in log:
                print(log[-5000:])


def nft(netns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args], capture_output=True, text=True, check=True
    ).stdout


def lb_slice(n: int) -> k.Obj:
    """``n`` ready endpoints on this node (addresses only: the health port counts them)."""
    eps = [k.endpoint(f"10.244.1.{200 + i}", node="hc-node") for i in range(n)]
    return k.endpoint_slice("lb-abc", "lb", eps, [k.port(8080, "http")], namespace=NS)


def body(endpoints: int, healthy: bool) -> str:
    return (
        f'{{\n\t"service": {{\n\t\t"namespace": "{NS}",\n\t\t"name": "lb"\n\t}},\n'
        f'\t"localEndpoints": {endpoints},\n\t"serviceProxyHealthy": {json.dumps(healthy)}\n}}'
    )


def test_health_ports_answer_503_while_a_change_waits_for_a_refused_sync_and_200_after(env: Env) -> None:
    svc = k.service(
        "lb",
        ["10.96.9.10"],
        [k.port(80, "http", node_port=30191)],
        namespace=NS,
        type="LoadBalancer",
        externalTrafficPolicy="Local",
        healthCheckNodePort=HC_PORT,
    )
    env.cl.apply(svc, lb_slice(7))

    def answer(status: int, weight: str) -> tuple[int, dict[str, str], str] | None:
        try:
            got = env.ask(HC_PORT)
        except OSError:
            return None
        return got if got[0] == status and got[1].get(WEIGHT) == weight else None

    # syncs succeed: 200, the weight header, kube-proxy's body and headers, for every method
    _, headers, text = eventually(lambda: answer(200, "7"), timeout=30, what="health port 200 with 7 endpoints")
    assert text == body(7, True)
    assert headers["Content-Type"] == "application/json" and headers["X-Content-Type-Options"] == "nosniff"
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
        status, headers, text = env.ask(HC_PORT, "/any/path", method)
        assert (status, headers[WEIGHT], text) == (200, "7", body(7, True)), method
    status, headers, text = env.ask(HC_PORT, "/", "HEAD")
    assert (status, headers[WEIGHT], headers["Content-Length"], text) == (200, "7", str(len(body(7, True))), "")
    for path in ("/healthz", "/livez"):
        status, _, text = env.ask(10256, path)
        assert status == 200 and json.loads(text)["healthy"] is True, (path, text)
    status, _, text = env.ask(10256, "/healthz", "POST")
    assert status == 200 and json.loads(text)["nodeEligible"] is True

    # the kernel refuses every sync from the next change on
    nft(env.node.netns, "add", "rule", "ip", "nftproxy", "services", "ip", "daddr", "192.0.2.255", "jump", "cluster-7")
    env.cl.apply(lb_slice(6))
    applied = time.monotonic()  # the proxy queues the change after this (its watch event)
    _, headers, text = eventually(lambda: answer(503, "7"), timeout=60, what="health port 503 while syncs fail")
    late = time.monotonic() - applied
    assert late >= HEALTH_TIMEOUT, f"503 after {late:.1f}s: before the change had waited 2 x --sync-period"
    assert text == body(7, False)  # the last synced count, the proxy unhealthy (as kube-proxy)
    status, _, text = env.ask(10256, "/livez")
    assert status == 503 and json.loads(text)["healthy"] is False
    assert {f["healthy"] for f in json.loads(text)["status"].values()} == {False}
    status, _, text = env.ask(10256, "/healthz")
    assert status == 503 and json.loads(text)["healthy"] is False
    assert env.ask(HC_PORT, "/", "POST")[0] == 503
    st = env.cl.proxy_status(env.node).get("status", {})
    assert "busy" in str(st.get("lastError", "")).lower(), st

    # the kernel accepts again: the next retry goes through, 200 with the new count
    handle = next(
        line.rsplit("# handle ", 1)[1]
        for line in nft(env.node.netns, "-a", "list", "chain", "ip", "nftproxy", "services").splitlines()
        if "jump cluster-7" in line
    )
    nft(env.node.netns, "delete", "rule", "ip", "nftproxy", "services", "handle", handle.strip())
    _, _, text = eventually(lambda: answer(200, "6"), timeout=60, what="health port 200 after the retry")
    assert text == body(6, True)
    for path in ("/healthz", "/livez"):
        assert env.ask(10256, path)[0] == 200, path

    # no local endpoint: 503 with the proxy healthy
    env.cl.apply(lb_slice(0))
    _, _, text = eventually(lambda: answer(503, "0"), timeout=30, what="health port 503 with no endpoint")
    assert text == body(0, True)
    env.cl.delete("service", "lb", NS)
    env.cl.delete("endpointslice", "lb-abc", NS)
