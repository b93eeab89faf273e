"""`nftproxy run`'s start against a real kube-apiserver (operator/boot.py): the first sync is made
from plain lists before kopf is imported, and our watches start at those lists' versions.
Changes made between the lists and the watches (injected right after the first sync by
tests/support/between.py: a Service created, one deleted, a slice changed) all reach the kernel,
and nothing the lists had is replayed."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane, find_binary
from testkit.k8s.kubeproxy import http_get_in, parse_metrics
from testkit.lab.netlab import NetLab, Node, Pod, cleanup_stale
from tests.support.between import VARIABLE

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

NS = "boot"
FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s")
BULK = 30  # Services listed at start: a replay of the lists by the watches would show as that many events


def web(name: str, ip: str, pod: Pod) -> list[k.Obj]:
    return [
        k.service(name, [ip], [k.port(80, "http")], namespace=NS),
        slice_of(name, pod),
    ]


def slice_of(name: str, pod: Pod) -> k.Obj:
    eps = [k.endpoint(pod.ipv4, node="boot-node")]
    return k.endpoint_slice(f"{name}-abc", name, eps, [k.port(8080, "http")], namespace=NS)


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    done: Path

    def answers(self, ip: str) -> set[str]:
        return {r.pod or str(r.error) for r in self.cl.lab.probe(self.node, "tcp", ip, 80, count=4, timeout=1.0)}

    def metrics(self) -> dict[str, float]:
        status, body = http_get_in(self.node.netns, self.node.ipv4, 10249, "/metrics")
        assert status == 200
        return parse_metrics(body)


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale()
    work = tmp_path_factory.mktemp("boot")
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, work)
        try:
            node = cl.add_node("boot-node", 1)
            p0, p1 = (lab.add_pod(node, f"p{i}", tcp=(8080,), udp=()) for i in range(2))
            cl.namespace(NS)
            bulk = [k.service(f"s{i}", [f"10.96.6.{i + 1}"], [k.port(80)], namespace=NS) for i in range(BULK)]
            cl.apply(*bulk, *web("old", "10.96.5.10", p0), *web("gone", "10.96.5.11", p0))
            cl.apply(*web("changed", "10.96.5.12", p0))
            # between the first sync and the watches: one created, one deleted, one slice changed
            new = work / "new.json"
            new.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": web("new", "10.96.5.13", p1)}))
            changed = work / "changed.json"
            changed.write_text(json.dumps(slice_of("changed", p1)))
            spec = work / "between.json"
            spec.write_text(
                json.dumps(
                    {
                        "binary": str(find_binary("kubectl")),
                        "done": str(work / "done.json"),
                        "kubectl": [
                            ["apply", "-f", str(new)],
                            ["-n", NS, "delete", "service", "gone"],
                            ["-n", NS, "delete", "endpointslice", "gone-abc"],
                            ["apply", "-f", str(changed)],
                        ],
                    }
                )
            )
            os.environ[VARIABLE] = str(spec)
            try:
                cl.start_proxy(node, *FLAGS, module="tests.support.between")
            finally:
                del os.environ[VARIABLE]
            yield Env(cl, node, work / "done.json")
        finally:
            log = cl.proxy_log(node) if cl.proxies else ""
            cl.close()
            if log and "Traceback" in log:
                print(log[-5000:])


def test_the_first_sync_is_made_before_kopf_starts(env: Env) -> None:
    done = eventually(lambda: env.done.exists() and json.loads(env.done.read_text()), timeout=60, what="hook ran")
    assert done["syncs"] == 1 and not done["kopf imported"]
    assert done["services"] >= BULK + 3  # the bulk, old, gone, changed (and default/kubernetes)
    assert set(done["versions"]) == {"services", "endpointslices"}


def test_changes_between_the_lists_and_the_watches_reach_the_kernel(env: Env) -> None:
    eventually(lambda: env.answers("10.96.5.13") == {"p1"}, timeout=60, what="created after the list: served")
    eventually(lambda: env.answers("10.96.5.12") == {"p1"}, what="slice changed after the list: on p1")
    eventually(lambda: env.answers("10.96.5.11") == {"timeout"}, what="deleted after the list: gone")
    assert env.answers("10.96.5.10") == {"p0"}  # listed, unchanged


def test_the_watches_replay_nothing_the_lists_had(env: Env) -> None:
    """The watches start at the lists' versions: only the writes made after them arrive as events
    (2 for Services, 3 for slices), not the BULK + 4 objects listed."""
    eventually(lambda: env.answers("10.96.5.13") == {"p1"}, timeout=60, what="served")
    m = env.metrics()
    events = {r: m.get(f'nftproxy_watch_events_total{{resource="{r}"}}', 0.0) for r in ("services", "endpointslices")}
    assert 2 <= events["services"] < BULK / 2 and 3 <= events["endpointslices"] < BULK / 2, events
    status = env.cl.proxy_status(env.node).get("status", {})
    assert status.get("failures") == 0
