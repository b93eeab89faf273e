"""The objects of the kernel's traffic-policy and packet-flow labs, and each node's compiled table,
for the packet tracer (tests/support/tracer.py).

The object lists are those of tests/netns/test_traffic_policies.py ("two": node1 zone-a with pods
a1, a2; node2 zone-b with b1, b2; clients ext, ext2) and tests/netns/test_packet_flows.py
("flows": node1 with a, b, t1, t2; node2 with c; client ext), built from the hosts' addresses. The
default hosts have the addresses testkit.lab.netlab gives them (node i: 198.18.0.i; its n-th pod
10.244.i.(n+1)), so a tracer test names what a kernel test sees, and the kernel cross-check
(tests/netns/test_tracer_crosscheck.py) passes its lab's real hosts.

Each node's table is compiled the way ``nftproxy apply -f … <flags>`` compiles it (the proxy
flags, the Node merged in by ``ProxyConfig.for_node``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nftproxy.cli.flags import add_proxy_flags, config_from_args
from nftproxy.compiler import compile_tables
from nftproxy.compiler.config import this_node
from nftproxy.model.manifests import classify
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.tracer import Outcome, Packet, Trace, Tracer

HTTP = [k.port(8080, "http")]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class HostLike(Protocol):
    """What a lab host (testkit.lab.netlab Node, Pod, Client) and an ``Addr`` both have."""

    @property
    def name(self) -> str: ...
    @property
    def ipv4(self) -> str: ...
    @property
    def ipv6(self) -> str: ...


class PodLike(HostLike, Protocol):
    @property
    def node(self) -> _Named: ...


@dataclass(frozen=True)
class NodeAddr:
    name: str
    ipv4: str
    ipv6: str


@dataclass(frozen=True)
class Addr:
    name: str
    ipv4: str
    ipv6: str
    node: NodeAddr


def lab_node(index: int) -> NodeAddr:
    return NodeAddr(f"node{index}", f"198.18.0.{index}", f"fd00:198:18::{index}")


def lab_pod(node: NodeAddr, name: str, n: int) -> Addr:
    """The ``n``-th pod added to ``node`` (n from 1), at the address NetLab gives it."""
    i = node.name.removeprefix("node")
    return Addr(name, f"10.244.{i}.{n + 1}", f"fd00:10:244:{i}::{n + 1}", node)


def lab_client(name: str, index: int) -> NodeAddr:
    return NodeAddr(name, f"198.18.0.{index}", f"fd00:198:18::{index}")


def node_table_tracer(objects: Sequence[k.Obj], flags: Sequence[str], family: Family = Family.IP) -> Tracer:
    """The tracer of one node's table: ``objects`` compiled as ``nftproxy apply -f`` with ``flags``
    does; the node's addresses (its --node-ip, else its Node's) are its local ones."""
    p = argparse.ArgumentParser()
    add_proxy_flags(p)
    config = config_from_args(p.parse_args(list(flags)))
    inputs = classify(objects, config.service_proxy_name)
    config = config.for_node(this_node(inputs.nodes, config.node_name))
    desired = compile_tables(inputs.services, inputs.slices, config, inputs.ignored)
    table = next(t for t in desired.tables if t.family is family)
    return Tracer(table, [str(ip) for ip in config.node_ips])


# -- tests/netns/test_traffic_policies.py -------------------------------------------------------


def _node_obj(name: str, ip: str, zone: str) -> k.Obj:
    return k.node(name, {"InternalIP": ip}, **{"topology.kubernetes.io/zone": zone})


def _ep(p: PodLike, **hints: list[str]) -> k.Obj:
    e = k.endpoint(p.ipv4, node=p.node.name)
    if hints:
        e["hints"] = {key: [{"name": v} for v in vals] for key, vals in hints.items()}
    return e


def policy_objects(node1: HostLike, node2: HostLike, a1: PodLike, a2: PodLike, b1: PodLike, b2: PodLike) -> list[k.Obj]:
    """The objects of tests/netns/test_traffic_policies.py (the kernel) and of the tracer tests."""
    return [
        _node_obj("node1", node1.ipv4, "zone-a"),
        _node_obj("node2", node2.ipv4, "zone-b"),
        k.service(
            "lb-local",
            ["10.96.3.10"],
            [k.port(80, "http", node_port=30310)],
            type="LoadBalancer",
            lb_ips=["198.19.3.10"],
            externalTrafficPolicy="Local",
            healthCheckNodePort=32310,
        ),
        k.endpoint_slice("lb-local-1", "lb-local", [_ep(a1), _ep(b1), _ep(b2)], HTTP),
        k.service(
            "remote",
            ["10.96.3.11"],
            [k.port(80, "http", node_port=30311)],
            type="NodePort",
            externalTrafficPolicy="Local",
        ),
        k.endpoint_slice("remote-1", "remote", [_ep(b1)], HTTP),
        k.service("itp", ["10.96.3.12"], [k.port(80, "http")], internalTrafficPolicy="Local"),
        k.endpoint_slice("itp-1", "itp", [_ep(a1), _ep(a2), _ep(b1)], HTTP),
        k.service("itp-remote", ["10.96.3.13"], [k.port(80, "http")], internalTrafficPolicy="Local"),
        k.endpoint_slice("itp-remote-1", "itp-remote", [_ep(b1)], HTTP),
        k.service("close", ["10.96.3.14"], [k.port(80, "http")], trafficDistribution="PreferClose"),
        k.endpoint_slice(
            "close-1",
            "close",
            [_ep(a1, forZones=["zone-a"]), _ep(b1, forZones=["zone-b"]), _ep(b2, forZones=["zone-b"])],
            HTTP,
        ),
        k.service("partial", ["10.96.3.15"], [k.port(80, "http")], trafficDistribution="PreferClose"),
        k.endpoint_slice("partial-1", "partial", [_ep(a1, forZones=["zone-a"]), _ep(b1)], HTTP),
        k.service("samenode", ["10.96.3.16"], [k.port(80, "http")], trafficDistribution="PreferSameNode"),
        k.endpoint_slice(
            "samenode-1",
            "samenode",
            [
                _ep(a1, forNodes=["node1"], forZones=["zone-a"]),
                _ep(a2, forNodes=["node1"], forZones=["zone-a"]),
                _ep(b1, forNodes=["node2"], forZones=["zone-b"]),
            ],
            HTTP,
        ),
        k.service(
            "fw",
            ["10.96.3.17"],
            [k.port(80, "http", node_port=30317)],
            type="LoadBalancer",
            lb_ips=["198.19.3.17"],
            loadBalancerSourceRanges=["198.18.0.100/32", "192.0.2.0/24"],
        ),
        k.endpoint_slice("fw-1", "fw", [_ep(a1)], HTTP),
        k.service(
            "term-local",
            ["10.96.3.18"],
            [k.port(80, "http", node_port=30318)],
            type="NodePort",
            externalTrafficPolicy="Local",
            internalTrafficPolicy="Local",
        ),
        k.endpoint_slice(
            "term-local-1",
            "term-local",
            [
                {**_ep(a2), "conditions": {"ready": False, "serving": True, "terminating": True}},
                {**_ep(a1), "conditions": {"ready": False, "serving": False, "terminating": True}},
                _ep(b1),
            ],
            HTTP,
        ),
    ]


def policy_flags(node: HostLike) -> list[str]:
    """test_traffic_policies' ``nftproxy apply`` flags on ``node``."""
    return ["--node-name", node.name, "--cluster-cidr", "10.244.0.0/16"]


# -- tests/netns/test_packet_flows.py -----------------------------------------------------------


def flow_objects(a: PodLike, b: PodLike, c: PodLike, t1: PodLike, t2: PodLike) -> list[k.Obj]:
    """The objects of tests/netns/test_packet_flows.py (the kernel) and of the tracer tests."""
    n1, n2 = a.node.name, c.node.name
    return [
        k.service(
            "web",
            ["10.96.0.10", "fd00:10:96::10"],
            [k.port(80, "http", node_port=30080)],
            type="LoadBalancer",
            external_ips=["198.19.0.20"],
            lb_ips=["198.19.0.10", "fd00:198:19::10"],
        ),
        k.endpoint_slice("web-4", "web", [k.endpoint(a.ipv4, node=n1), k.endpoint(b.ipv4, node=n1)], HTTP),
        k.endpoint_slice(
            "web-6", "web", [k.endpoint(a.ipv6, node=n1), k.endpoint(b.ipv6, node=n1)], HTTP, address_type="IPv6"
        ),
        k.service("dns", ["10.96.0.53"], [k.port(53, "dns", "UDP")], namespace="kube-system"),
        k.endpoint_slice(
            "dns-1", "dns", [k.endpoint(c.ipv4, node=n2)], [k.port(5353, "dns", "UDP")], namespace="kube-system"
        ),
        k.service("empty", ["10.96.0.20"], [k.port(80, node_port=30090)], type="NodePort"),
        k.service("term", ["10.96.0.30"], [k.port(80, "http")]),
        k.endpoint_slice(
            "term-1",
            "term",
            [
                k.endpoint(t1.ipv4, ready=False, serving=True, terminating=True, node=n1),
                k.endpoint(t2.ipv4, ready=False, serving=False, terminating=True, node=n1),
            ],
            HTTP,
        ),
        k.service("mixed", ["10.96.0.31"], [k.port(80, "http")]),
        k.endpoint_slice(
            "mixed-1",
            "mixed",
            [k.endpoint(t1.ipv4, ready=False, serving=True, terminating=True), k.endpoint(t2.ipv4)],
            HTTP,
        ),
        k.service("headless", ["None"], [k.port(80)]),
        k.service("other", ["10.96.0.40"], [k.port(80)], labels={"service.kubernetes.io/service-proxy-name": "x"}),
        k.endpoint_slice("other-1", "other", [k.endpoint(a.ipv4)], [k.port(8080)]),
    ]


def flow_flags(node: HostLike) -> list[str]:
    """test_packet_flows' ``nftproxy apply`` flags on ``node`` (node_flags there)."""
    return [
        "--node-name", node.name,
        "--node-ip", f"{node.ipv4},{node.ipv6}",
        "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48",
    ]  # fmt: skip


# -- a lab of tracers: the kernel tests' questions, answered from the nodes' tables --------------


def kernel_words(outcome: Outcome, pods: dict[str, str]) -> str:
    """A tracer outcome in the words of a kernel probe: the pod that answers, "refused" (REJECT,
    or accepted unchanged to the node itself, where nothing listens in the labs), "timeout" (DROP,
    or accepted unchanged and routed on, to a Service IP nobody serves)."""
    target = outcome.target
    if target == "REJECT" or (target == "ACCEPT" and outcome.delivered == "local"):
        return "refused"
    if target in ("DROP", "ACCEPT"):
        return "timeout"
    addr = target.rsplit(":", 1)[0].strip("[]")
    return pods.get(addr, target)


class TracerLab:
    """Every node's tracer; a packet is traced on the node it reaches first: a node's own
    (locally generated), a pod's node, or for a client the node whose address it dials, else the
    one routing the LoadBalancer and external IPs (node1, as NetLab.add_client(via=node1))."""

    def __init__(
        self,
        nodes: Sequence[HostLike],
        pods: Sequence[PodLike],
        objects: Sequence[k.Obj],
        flags: Callable[[HostLike], list[str]],
        via: HostLike | None = None,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.pod_of = {p.ipv4: p.name for p in pods} | {p.ipv6: p.name for p in pods}
        self.pod_node = {p.name: p.node.name for p in pods}
        self.via = (via or nodes[0]).name
        self.tracers = {
            (n.name, f): node_table_tracer(objects, flags(n), f) for n in nodes for f in (Family.IP, Family.IP6)
        }

    def trace(self, src: HostLike, dst: str, port: int, proto: str = "tcp") -> Trace:
        v6 = ":" in dst
        family = Family.IP6 if v6 else Family.IP
        addr = src.ipv6 if v6 else src.ipv4
        if src.name in self.nodes:
            node, local = src.name, True
        elif src.name in self.pod_node:
            node, local = self.pod_node[src.name], False
        else:
            node = next((n.name for n in self.nodes.values() if dst in (n.ipv4, n.ipv6)), self.via)
            local = False
        return self.tracers[(node, family)].trace(Packet(addr, dst, port, proto, local))

    def pods(self, src: HostLike, dst: str, port: int, proto: str = "tcp") -> set[str]:
        """What Two.pods / a probe's results would be: pod names, "refused" or "timeout"."""
        return {kernel_words(o, self.pod_of) for o in self.trace(src, dst, port, proto).outcomes}

    def masq(self, src: HostLike, dst: str, port: int, proto: str = "tcp") -> bool:
        return self.trace(src, dst, port, proto).masq
