"""`nftproxy run` against a real kube-apiserver with a Service the kernel refuses (issue 19): it is
named in ProxyStatus and an Event, every other Service is served and keeps changing, and fixing
its object brings it back. The refusal is injected (tests/support/poison.py: a Service with port
666 compiles to an element nft refuses); everything else is the real command."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, Node, Pod, cleanup_stale
from tests.support.poison import BAD_ADDRESS, POISON_PORT

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s")
NS = "refused"


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    pods: list[Pod]

    def answers(self, ip: str, port: int = 80, count: int = 1) -> set[str]:
        return {r.pod or str(r.error) for r in self.cl.lab.probe(self.node, "tcp", ip, port, count=count, timeout=1.0)}

    def skipped(self) -> list[str]:
        status = self.cl.proxy_status(self.node).get("status", {})
        return [
            f"{s['kind']} {s['name']}: {s['reason']}" for s in status.get("skipped", []) if s.get("namespace") == NS
        ]


def web(name: str, ip: str, port: int, pods: list[Pod]) -> list[k.Obj]:
    return [
        k.service(name, [ip], [k.port(port, "http")], namespace=NS),
        k.endpoint_slice(
            f"{name}-abc",
            name,
            [k.endpoint(p.ipv4, node="rf-node") for p in pods],
            [k.port(8080, "http")],
            namespace=NS,
        ),
    ]


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale()
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, tmp_path_factory.mktemp("refused"))
        try:
            node = cl.add_node("rf-node", 1)
            pods = [lab.add_pod(node, f"p{i}", tcp=(8080,), udp=()) for i in range(2)]
            cl.namespace(NS)
            # the bad Service exists before the proxy starts: its very first sync is refused
            cl.apply(*web("good", "10.96.4.10", 80, pods[:1]), *web("bad", "10.96.4.11", POISON_PORT, pods[1:]))
            cl.start_proxy(node, *FLAGS, module="tests.support.poison")
            yield Env(cl, node, pods)
        finally:
            cl.close()


def test_the_refused_service_is_named_and_the_others_are_served(env: Env) -> None:
    eventually(lambda: env.answers("10.96.4.10") == {"p0"}, timeout=30, what="good served")
    expected = (
        "Service bad: the kernel refused its IPv4 rules: Error: Could not resolve hostname: Name or service "
        f"not known [add element ip nftproxy cluster-ips {{ {BAD_ADDRESS} }}]"
    )
    assert eventually(lambda: env.skipped() or None, what="ProxyStatus skipped") == [expected]
    assert env.answers("10.96.4.11", POISON_PORT) == {"timeout"}  # not programmed at all

    def event() -> str | None:
        found = [e for e in env.cl.proxy_events(NS) if e["involvedObject"]["name"] == "bad"]
        return f"{found[0]['reason']}: {found[0]['message']}" if found else None

    assert eventually(event, what="an Event on the bad Service") == (
        f"RefusedByKernel: nftproxy on rf-node skipped this Service: {expected.split(': ', 1)[1]}"
    )
    assert "ERROR nftproxy.dataplane" in env.cl.proxy_log(env.node)


def test_changes_keep_flowing_and_the_fix_brings_it_back(env: Env) -> None:
    eventually(lambda: env.skipped() or None, what="the bad Service reported")
    env.cl.apply(*web("good", "10.96.4.10", 80, env.pods))  # another Service changes
    eventually(lambda: env.answers("10.96.4.10", count=12) == {"p0", "p1"}, what="good scaled to 2")
    env.cl.apply(*web("later", "10.96.4.12", 80, env.pods[1:]))  # and a new one
    eventually(lambda: env.answers("10.96.4.12") == {"p1"}, what="a new Service served")

    env.cl.apply(*web("bad", "10.96.4.11", 81, env.pods[1:]))  # the fix: another port
    eventually(lambda: env.answers("10.96.4.11", 81) == {"p1"}, what="the fixed Service served")
    eventually(lambda: env.skipped() == [] or None, what="nothing skipped")
