"""Load-balancing algorithms with real connections (`nftproxy apply` in a node namespace).

* round-robin: exact rotation over k x N connections; two round-robin Services with the same
  endpoint count taking turns each still rotate (a counter shared per endpoint count would keep
  each of them on one endpoint: N = 2 shows it).
* random: every endpoint within a tolerance.
* source-hash: each client address always reaches the same endpoint; different clients spread.
* sessionAffinity wins for a known client, whatever the algorithm.
* a bad annotation value: the Service still answers (at random).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

HTTP = [k.port(8080, "http")]
SOURCES = [f"198.18.0.{i}" for i in range(150, 166)]  # extra addresses of the outside client
SOURCES6 = [f"fd00:198:18::{i:x}" for i in range(150, 166)]


def svc(name: str, ip: str, algorithm: str | None, node_port: int | None = None, **spec: Any) -> k.Obj:
    kind = "NodePort" if node_port else "ClusterIP"
    obj = k.service(name, [ip], [k.port(80, "http", node_port=node_port)], type=kind, **spec)
    if algorithm:
        obj["metadata"]["annotations"] = {"nftproxy.io/load-balancing": algorithm}
    return obj


def eps(name: str, pods: list[Pod]) -> k.Obj:
    return k.endpoint_slice(f"{name}-1", name, [k.endpoint(p.ipv4, node="node1") for p in pods], HTTP)


def eps6(name: str, pods: list[Pod]) -> k.Obj:
    return k.endpoint_slice(f"{name}-6", name, [k.endpoint(p.ipv6, node="node1") for p in pods], HTTP,
                            address_type="IPv6")  # fmt: skip


@dataclass
class Lab:
    lab: NetLab
    node: Node
    pods: list[Pod]
    ext: Client

    def who(self, src: Node | Client, ip: str, port: int, count: int = 1, source: str | None = None) -> list[str]:
        results = self.lab.probe(src, "tcp", ip, port, count=count, timeout=1.0, source=source)
        assert all(r.ok for r in results), results
        return [str(r.pod) for r in results]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale("op")
    with NetLab("op") as nl:
        node = nl.add_node("node1", 1)
        pods = [nl.add_pod(node, f"p{i}", tcp=(8080,)) for i in range(3)]
        ext = nl.add_client("ext", 100, via=node)
        nl.ip(ext, *(f"addr add {a}/32 dev eth0" for a in SOURCES))
        nl.ip(ext, *(f"addr add {a}/128 dev eth0 nodad" for a in SOURCES6))
        p0, p1, p2 = pods
        objs = [
            svc("rr3", "10.96.4.10", "round-robin", node_port=30410), eps("rr3", pods),
            svc("rr-a", "10.96.4.11", "round-robin"), eps("rr-a", [p0, p1]),
            svc("rr-b", "10.96.4.12", "round-robin"), eps("rr-b", [p1, p2]),
            svc("rand", "10.96.4.20", None), eps("rand", pods),
            svc("sh", "10.96.4.30", "source-hash", node_port=30430), eps("sh", pods),
            svc("sticky-rr", "10.96.4.40", "round-robin", sessionAffinity="ClientIP",
                sessionAffinityConfig={"clientIP": {"timeoutSeconds": 120}}), eps("sticky-rr", pods),
            svc("bad", "10.96.4.50", "least-connection"), eps("bad", pods),
            svc("rr6", "fd00:10:96::410", "round-robin"), eps6("rr6", pods),
            svc("sh6", "fd00:10:96::430", "source-hash", node_port=30431), eps6("sh6", pods),
        ]  # fmt: skip
        manifest = k.write(Path(tmp_path_factory.mktemp("lb")) / "objects.yaml", objs)
        r = nl.exec(node, *nftproxy_argv(), "apply", "-f", str(manifest), "--node-name", "node1",
                    "--node-ip", f"{node.ipv4},{node.ipv6}", "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48",
                    check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "skipped Service default/bad: annotation nftproxy.io/load-balancing: 'least-connection'" in r.stderr
        yield Lab(nl, node, pods, ext)


def _is_rotation(seq: list[str], n: int) -> bool:
    """seq follows one cycle of n distinct endpoints, over and over."""
    cycle = seq[:n]
    return len(set(cycle)) == n and all(seq[i] == cycle[i % n] for i in range(len(seq)))


def test_round_robin_is_exact_over_k_times_n(lab: Lab) -> None:
    k_rounds, n = 5, 3
    seq = lab.who(lab.node, "10.96.4.10", 80, count=k_rounds * n)
    assert _is_rotation(seq, n), seq
    assert Counter(seq) == {p.name: k_rounds for p in lab.pods}
    # the NodePort from outside has a counter of its own: exact too
    seq = lab.who(lab.ext, lab.node.ipv4, 30410, count=k_rounds * n)
    assert _is_rotation(seq, n), seq


def test_two_round_robin_services_taking_turns_each_rotate(lab: Lab) -> None:
    a, b = [], []
    for _ in range(8):  # alternate: a, b, a, b, … (a shared counter would pin each to one endpoint)
        a += lab.who(lab.node, "10.96.4.11", 80)
        b += lab.who(lab.node, "10.96.4.12", 80)
    assert _is_rotation(a, 2) and Counter(a) == {"p0": 4, "p1": 4}, a
    assert _is_rotation(b, 2) and Counter(b) == {"p1": 4, "p2": 4}, b


def test_random_within_tolerance(lab: Lab) -> None:
    seen = Counter(lab.who(lab.node, "10.96.4.20", 80, count=300))
    # binomial(300, 1/3): mean 100, sd 8.2; 60 is ~5 sd below
    assert set(seen) == {"p0", "p1", "p2"} and min(seen.values()) >= 60, seen


def test_source_hash_constant_per_client_spread_across_clients(lab: Lab) -> None:
    chosen = {}
    for source in SOURCES:
        got = set(lab.who(lab.ext, lab.node.ipv4, 30430, count=6, source=source))
        assert len(got) == 1, f"{source} reached {got}"
        chosen[source] = got.pop()
    assert len(set(chosen.values())) >= 2, chosen  # 16 clients over 3 endpoints
    again = {s: lab.who(lab.ext, lab.node.ipv4, 30430, source=s)[0] for s in SOURCES[:4]}
    assert again == {s: chosen[s] for s in SOURCES[:4]}
    # the ClusterIP from the node: one source address -> one endpoint, every time
    assert len(set(lab.who(lab.node, "10.96.4.30", 80, count=10))) == 1


def test_affinity_wins_over_round_robin(lab: Lab) -> None:
    first = lab.who(lab.node, "10.96.4.40", 80)[0]
    assert lab.who(lab.node, "10.96.4.40", 80, count=6) == [first] * 6


def test_bad_value_is_load_balanced_at_random(lab: Lab) -> None:
    seen = Counter(lab.who(lab.node, "10.96.4.50", 80, count=60))
    assert set(seen) == {"p0", "p1", "p2"}, seen


def test_ipv6_round_robin_and_source_hash(lab: Lab) -> None:
    seq = lab.who(lab.node, "fd00:10:96::410", 80, count=9)
    assert _is_rotation(seq, 3), seq
    chosen = {}
    for source in SOURCES6:
        got = set(lab.who(lab.ext, lab.node.ipv6, 30431, count=4, source=source))
        assert len(got) == 1, f"{source} reached {got}"
        chosen[source] = got.pop()
    assert len(set(chosen.values())) >= 2, chosen
