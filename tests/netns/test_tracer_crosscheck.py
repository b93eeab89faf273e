"""The packet tracer (tests/support/tracer.py) against the kernel: the proof it is faithful.

The traffic-policy lab of test_traffic_policies.py (objects and flags from
tests/support/policy_lab.py), applied to real node namespaces; for each case the tracer's answer,
computed from the table the node compiled, must be what real packets get: the same pods (each
possible one seen, no other), "refused" for REJECT, "timeout" for DROP, and the client's source
seen by the pod exactly when the tracer says it is not masqueraded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.policy_lab import TracerLab, policy_flags, policy_objects
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns


@dataclass
class Lab:
    lab: NetLab
    tracers: TracerLab
    hosts: dict[str, Node | Pod | Client]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale()
    with NetLab() as nl:
        n1, n2 = nl.add_node("node1", 1), nl.add_node("node2", 2)
        a1, a2 = (nl.add_pod(n1, n, tcp=(8080,), udp=()) for n in ("a1", "a2"))
        b1, b2 = (nl.add_pod(n2, n, tcp=(8080,), udp=()) for n in ("b1", "b2"))
        ext, ext2 = nl.add_client("ext", 100, via=n1), nl.add_client("ext2", 101, via=n1)
        objects = policy_objects(n1, n2, a1, a2, b1, b2)
        manifest = k.write(tmp_path_factory.mktemp("crosscheck") / "objects.yaml", objects)
        for node in (n1, n2):
            r = nl.exec(node, *nftproxy_argv("apply", "-f", str(manifest), *policy_flags(node)), check=False)
            assert r.returncode == 0, r.stderr
        hosts: dict[str, Node | Pod | Client] = {h.name: h for h in (n1, n2, a1, a2, b1, b2, ext, ext2)}
        yield Lab(nl, TracerLab([n1, n2], [a1, a2, b1, b2], objects, policy_flags), hosts)


# source, destination, port: one of each verdict the tracer gives (endpoints of a Local and a
# Cluster policy, masqueraded and not, the short-circuits, DROP of Local policies and source
# ranges, REJECT of a port no Service serves)
CASES = [
    ("ext", "198.19.3.10", 80),  # eTP Local LB: a1, source kept
    ("ext", "198.18.0.2", 30310),  # eTP Local NodePort on node2: b1, b2
    ("ext", "198.18.0.1", 30311),  # eTP Local, no local endpoint: DROP
    ("a2", "198.19.3.10", 80),  # pod short-circuit: every endpoint
    ("node1", "198.18.0.1", 30311),  # the node's own: short-circuit, masqueraded
    ("a2", "10.96.3.12", 80),  # iTP Local
    ("a1", "10.96.3.13", 80),  # iTP Local, none here: DROP
    ("ext", "198.19.3.17", 80),  # source range allows: masqueraded (eTP Cluster)
    ("ext2", "198.19.3.17", 80),  # source range denies: DROP
    ("ext2", "198.18.0.1", 30317),  # NodePort not filtered
    ("a1", "10.96.3.12", 81),  # a ClusterIP port no Service serves: REJECT
    ("a1", "10.96.3.16", 80),  # same-node hints, hairpin to a1 masqueraded
]


@pytest.mark.parametrize(("source", "dest", "port"), CASES)
def test_tracer_agrees_with_the_kernel(lab: Lab, source: str, dest: str, port: int) -> None:
    src = lab.hosts[source]
    trace = lab.tracers.trace(src, dest, port)
    want = lab.tracers.pods(src, dest, port)
    count = 30 if len(want) > 1 else 4
    results = lab.lab.probe(src, "tcp", dest, port, count=count, timeout=0.7)
    seen = {r.pod or str(r.error) for r in results}
    assert seen == want, f"kernel {seen}, tracer {want}\n{trace.describe()}"
    by_pod = {o.target.rsplit(":", 1)[0]: o.masqueraded for o in trace.outcomes if o.dnat}
    pod_ip = {p.name: p.ipv4 for p in lab.hosts.values() if isinstance(p, Pod)}
    for r in results:
        if r.pod is not None and not isinstance(src, Node):  # a node masquerades to its own address
            masqueraded = by_pod[pod_ip[r.pod]]
            assert (r.peer != src.ipv4) is masqueraded, f"{r.pod} saw {r.peer}; tracer: masq={masqueraded}"
