"""Localhost NodePorts with real packets (--nodeport-addresses primary,localhost): the node's
table programmed by a Dataplane (the kernel backend, in the node's namespace), the userspace
proxy bound on that namespace's 127.0.0.1 and ::1 (as `nftproxy run --netns` binds it), pods
running echo servers behind the node, and clients on the node's loopback.

* TCP NodePorts on loopback reach the endpoints; round-robin rotates exactly; sessionAffinity
  ClientIP keeps a client on one pod; externalTrafficPolicy Local uses this node's endpoints
  only (none here: no listener, refused); no endpoints: refused; IPv6 on ::1.
* beyond upstream: an endpoint that refuses or does not answer (1 s) is skipped, the client is
  still served, and the retries are counted.
* UDP NodePorts on loopback are rejected (ICMP port unreachable: ECONNREFUSED on a connected
  socket) and counted in the table's named counter; on the node's IP they are DNATed as ever.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any, TypeVar

import pytest

from nftproxy.compiler import ProxyConfig, features
from nftproxy.compiler.config import nodeport_address
from nftproxy.dataplane.sync import Dataplane
from nftproxy.localhost_proxy import LocalhostNodePorts, localhost_rejections
from nftproxy.model.manifests import classify
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from nftproxy.operator.metrics import Metrics
from testkit.k8s import objects as k
from testkit.lab.netlab import NetLab, Node, Pod, cleanup_stale

pytestmark = pytest.mark.netns

T = TypeVar("T")
PREFIX = "lhnp-"
HTTP = [k.port(8080, "http")]
SILENT = "10.244.1.252"  # routed into a pod that does not own it: a SYN gets no answer
RR, STICKY, LOCAL, REMOTE, EMPTY, RETRY, RANDOM, DNS = 46080, 46081, 46082, 46083, 46084, 46085, 46086, 46053


class LoopThread:
    """An event loop in a thread of its own, as nftproxy run's: the proxy serves while the test's
    probes (subprocesses in the node's namespace) connect to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxy-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@dataclass
class Lab:
    lab: NetLab
    node: Node
    pods: dict[str, Pod]
    dp: Dataplane
    backend: KernelBackend
    proxy: LocalhostNodePorts
    metrics: Metrics
    loop: LoopThread

    def apply(self, objs: list[k.Obj]) -> None:
        """Objects into the dataplane, one sync, then the proxy's update (what the syncer does)."""
        got = classify(objs)
        assert not got.skipped, got.skipped
        for svc in got.services:
            self.dp.inputs.set_service(svc)
        for sl in got.slices:
            self.dp.inputs.set_slice(sl)
        self.dp.sync()
        self.loop.run(self.proxy.update(self.dp.localhost_nodeports()))

    def who(self, host: str, port: int, count: int = 1, source: str | None = None, proto: str = "tcp") -> list[str]:
        """Which pod answered each of ``count`` connections from the node, or the error."""
        results = self.lab.probe(self.node, proto, host, port, count=count, timeout=5.0, source=source)
        return [str(r.pod) if r.ok else str(r.error) for r in results]

    def value(self, name: str, family: str = "IPv4") -> float:
        return self.metrics.registry.get_sample_value(name, {"ip_family": family}) or 0.0


def svc(name: str, node_port: int, *, dual: bool = False, algorithm: str | None = None, **spec: Any) -> k.Obj:
    ips = [f"10.96.46.{node_port % 100}"] + ([f"fd00:10:96::46:{node_port % 100}"] if dual else [])
    obj = k.service(name, ips, [k.port(80, "http", node_port=node_port)], type="NodePort", **spec)
    if algorithm:
        obj["metadata"]["annotations"] = {"nftproxy.io/load-balancing": algorithm}
    return obj


def eps(name: str, addresses: list[tuple[str, str]], family: str = "IPv4") -> k.Obj:
    """(address, node name) endpoints of Service ``name``."""
    return k.endpoint_slice(f"{name}-{family[-1]}", name, [k.endpoint(a, node=n) for a, n in addresses], HTTP,
                            address_type=family)  # fmt: skip


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    cleanup_stale(PREFIX)
    with NetLab(PREFIX) as nl:
        node = nl.add_node("node1", 1)
        pods = {name: nl.add_pod(node, name, tcp=(8080,), udp=(5353,)) for name in ("p0", "p1", "p2", "far")}
        pods["closed"] = nl.add_pod(node, "closed", tcp=(9090,), udp=())  # nothing on 8080: refused
        nl.ip(node, f"route add {SILENT}/32 dev {pods['p2'].host_iface}")
        config = ProxyConfig(
            node_name="node1",
            node_ips=(ip_address(node.ipv4), ip_address(node.ipv6)),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
            nodeport_addresses=(*nodeport_address("primary"), *nodeport_address("localhost")),
            enabled_gates=frozenset({features.LOCALHOST_NODEPORTS}),
        )
        backend = KernelBackend(node.netns)
        loop = LoopThread()
        metrics = Metrics()
        proxy = LocalhostNodePorts(node.netns, metrics)
        lab = Lab(nl, node, pods, Dataplane(backend, config), backend, proxy, metrics, loop)
        p0, p1, p2, far, closed = (pods[n] for n in ("p0", "p1", "p2", "far", "closed"))
        here = [(p.ipv4, "node1") for p in (p0, p1, p2)]
        try:
            lab.apply([
                svc("rr", RR, dual=True, algorithm="round-robin"), eps("rr", here),
                eps("rr", [(p.ipv6, "node1") for p in (p0, p1, p2)], "IPv6"),
                svc("sticky", STICKY, sessionAffinity="ClientIP",
                    sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}}), eps("sticky", here),
                svc("local", LOCAL, externalTrafficPolicy="Local"),
                eps("local", [(p0.ipv4, "node1"), (far.ipv4, "node2")]),
                svc("remote", REMOTE, externalTrafficPolicy="Local"), eps("remote", [(far.ipv4, "node2")]),
                svc("empty", EMPTY),
                svc("retry", RETRY, algorithm="round-robin"),
                eps("retry", [(closed.ipv4, "node1"), (SILENT, "node1"), (p1.ipv4, "node1")]),
                svc("random", RANDOM), eps("random", here),
                k.service("dns", ["10.96.46.53", "fd00:10:96::46:53"],
                          [k.port(53, "dns", "UDP", node_port=DNS)], type="NodePort"),
                k.endpoint_slice("dns-4", "dns", [k.endpoint(p0.ipv4, node="node1")], [k.port(5353, "dns", "UDP")]),
                k.endpoint_slice("dns-6", "dns", [k.endpoint(p0.ipv6, node="node1")], [k.port(5353, "dns", "UDP")],
                                 address_type="IPv6"),
            ])  # fmt: skip
            yield lab
        finally:
            loop.run(proxy.close())
            loop.close()
            backend.close()


def _rotation(seq: list[str], n: int) -> bool:
    cycle = seq[:n]
    return len(set(cycle)) == n and all(seq[i] == cycle[i % n] for i in range(len(seq)))


def test_the_listeners_are_on_loopback_only(lab: Lab) -> None:
    # rr (both families), sticky, local, retry, random; remote and empty have no endpoints for it
    assert sorted(lab.proxy.listeners) == [(4, RR), (4, STICKY), (4, LOCAL), (4, RETRY), (4, RANDOM), (6, RR)]
    assert lab.value("kubeproxy_nftables_localhost_nodeport_listeners") == 5
    assert lab.value("kubeproxy_nftables_localhost_nodeport_listeners", "IPv6") == 1
    assert lab.who(lab.node.ipv4, RR) != ["refused"]  # the node's IP: the table's DNAT, as ever
    assert lab.who("127.0.0.2", RR) == ["refused"]  # served on 127.0.0.1 only, as upstream


def test_round_robin_rotates_through_the_proxy(lab: Lab) -> None:
    seq = lab.who("127.0.0.1", RR, count=9)
    assert _rotation(seq, 3) and Counter(seq) == {"p0": 3, "p1": 3, "p2": 3}, seq
    seq6 = lab.who("::1", RR, count=6)
    assert _rotation(seq6, 3), seq6
    # the pod sees the node (the proxy's own connection), not loopback
    r = lab.lab.probe(lab.node, "tcp", "127.0.0.1", RR)[0]
    assert r.ok and r.peer == lab.node.gateway4


def test_random_reaches_every_endpoint(lab: Lab) -> None:
    assert set(lab.who("127.0.0.1", RANDOM, count=30)) == {"p0", "p1", "p2"}


def test_affinity_sticks_per_client_address(lab: Lab) -> None:
    for source in ("127.0.0.1", "127.0.0.3", "127.0.0.4"):
        seq = lab.who("127.0.0.1", STICKY, count=6, source=source)
        assert len(set(seq)) == 1 and seq[0] in ("p0", "p1", "p2"), (source, seq)


def test_external_traffic_policy_local_uses_this_nodes_endpoints(lab: Lab) -> None:
    assert set(lab.who("127.0.0.1", LOCAL, count=8)) == {"p0"}
    assert lab.who("127.0.0.1", REMOTE) == ["refused"]  # endpoints elsewhere only: no listener


def test_no_endpoints_refused(lab: Lab) -> None:
    assert lab.who("127.0.0.1", EMPTY) == ["refused"]


def test_dead_endpoints_are_skipped_the_client_still_served(lab: Lab) -> None:
    """Round-robin over [closed (refused), SILENT (no answer), p1]: every connection is served by
    p1; the first waits for SILENT's 1 s timeout, the third meets closed and SILENT."""
    before = lab.value("nftproxy_localhost_nodeport_dial_retries_total")
    start = time.monotonic()
    assert lab.who("127.0.0.1", RETRY) == ["p1"]
    assert time.monotonic() - start > 0.9  # SILENT was given its second
    assert lab.who("127.0.0.1", RETRY, count=2) == ["p1", "p1"]
    assert lab.value("nftproxy_localhost_nodeport_dial_retries_total") - before == 3
    assert lab.value("nftproxy_localhost_nodeport_unserved_connections_total") == 0


def test_udp_on_loopback_is_rejected_and_counted(lab: Lab) -> None:
    def rejected() -> dict[tuple[str, str], int]:
        return localhost_rejections(lab.backend, lab.dp.config)

    before = rejected()
    assert lab.who("127.0.0.1", DNS, count=3, proto="udp") == ["refused"] * 3  # ICMP port unreachable
    assert lab.who("::1", DNS, proto="udp") == ["refused"]
    after = rejected()
    assert after[("IPv4", "UDP")] - before[("IPv4", "UDP")] == 3
    assert after[("IPv6", "UDP")] - before[("IPv6", "UDP")] == 1
    assert after[("IPv4", "SCTP")] == 0
    packets = lab.backend.counter_packets(Family.IP, "nftproxy")
    assert packets["localhost-nodeport-rejected-udp"] == after[("IPv4", "UDP")]
    assert lab.who(lab.node.ipv4, DNS, proto="udp") == ["p0"]  # on the node's IP: DNATed


def test_endpoint_changes_reach_the_proxy(lab: Lab) -> None:
    """A sync with other endpoints: the listener's list follows (no restart); its last endpoint
    gone, the listener closes (refused); back, it opens again."""
    p0, p2 = lab.pods["p0"], lab.pods["p2"]
    lab.apply([eps("random", [(p0.ipv4, "node1"), (p2.ipv4, "node1")])])
    assert set(lab.who("127.0.0.1", RANDOM, count=20)) == {"p0", "p2"}
    lab.apply([eps("random", [])])
    assert lab.who("127.0.0.1", RANDOM) == ["refused"]
    lab.apply([eps("random", [(p2.ipv4, "node1")])])
    assert lab.who("127.0.0.1", RANDOM, count=3) == ["p2"] * 3


def test_a_full_sync_reads_the_table_back_with_its_counters_and_sends_nothing(lab: Lab) -> None:
    """The kernel's table read back (named counters included) equals the desired one: a full
    sync (as after a restart) sends 0 operations, and the counters keep their counts."""
    before = lab.backend.counter_packets(Family.IP, "nftproxy")
    lab.dp.forget()
    result = lab.dp.sync()
    assert result.full and result.operations == 0, result
    assert lab.backend.counter_packets(Family.IP, "nftproxy") == before
    assert set(before) == {"localhost-nodeport-rejected-udp", "localhost-nodeport-rejected-sctp"}
