"""The network lab on its own (no nftproxy): plain routing between real namespaces."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.lab.netlab import (
    Client,
    NetLab,
    NetLabError,
    Node,
    Pod,
    cleanup_stale,
    list_netns,
)

pytestmark = pytest.mark.netns  # root and `ip netns`: tests/conftest.py skips without them

TCP, UDP = 8080, 5353


class Cluster:
    def __init__(self, lab: NetLab) -> None:
        self.lab = lab
        self.node1: Node = lab.add_node("node1", 1)
        self.node2: Node = lab.add_node("node2", 2)
        self.a1: Pod = lab.add_pod(self.node1, "a1", tcp=(TCP, 9090), udp=(UDP,))
        self.a2: Pod = lab.add_pod(self.node1, "a2", tcp=(TCP,), udp=(UDP,))
        self.b1: Pod = lab.add_pod(self.node2, "b1", tcp=(TCP,), udp=(UDP,))
        self.client: Client = lab.add_client("client", 100)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    cleanup_stale()
    with NetLab() as lab:
        yield Cluster(lab)


def port_of(proto: str) -> int:
    return TCP if proto == "tcp" else UDP


def addr(host: Node | Pod | Client, family: int) -> str:
    return host.ipv4 if family == 4 else host.ipv6


FAMILIES = pytest.mark.parametrize("family", [4, 6])
PROTOS = pytest.mark.parametrize("proto", ["tcp", "udp"])


@FAMILIES
@PROTOS
def test_pod_answers_node_from_gateway_address(cluster: Cluster, proto: str, family: int) -> None:
    pod, node = cluster.a1, cluster.node1
    [r] = cluster.lab.probe(node, proto, addr(pod, family), port_of(proto))
    assert r.error is None
    assert r.pod == "a1"
    assert r.port == port_of(proto)
    assert r.peer == (node.gateway4 if family == 4 else node.gateway6)


@FAMILIES
@PROTOS
def test_node_reaches_remote_pod_from_lan_addr(cluster: Cluster, proto: str, family: int) -> None:
    [r] = cluster.lab.probe(cluster.node1, proto, addr(cluster.b1, family), port_of(proto))
    assert (r.error, r.pod, r.peer) == (None, "b1", addr(cluster.node1, family))


@FAMILIES
@PROTOS
def test_pod_to_pod_across_nodes(cluster: Cluster, proto: str, family: int) -> None:
    [r] = cluster.lab.probe(cluster.a1, proto, addr(cluster.b1, family), port_of(proto))
    assert (r.error, r.pod, r.peer) == (None, "b1", addr(cluster.a1, family))
    [r] = cluster.lab.probe(cluster.b1, proto, addr(cluster.a1, family), port_of(proto))
    assert (r.error, r.pod, r.peer) == (None, "a1", addr(cluster.b1, family))


@FAMILIES
def test_pod_to_pod_on_same_node(cluster: Cluster, family: int) -> None:
    # Both pods use the same gateway address on their own veth.
    [r] = cluster.lab.probe(cluster.a1, "tcp", addr(cluster.a2, family), TCP)
    assert (r.error, r.pod, r.peer) == (None, "a2", addr(cluster.a1, family))


def test_second_port(cluster: Cluster) -> None:
    [r] = cluster.lab.probe(cluster.node1, "tcp", cluster.a1.ipv6, 9090)
    assert (r.error, r.pod, r.port) == (None, "a1", 9090)


@FAMILIES
def test_client_reaches_pod_via_node_route(cluster: Cluster, family: int) -> None:
    lab, client, node1 = cluster.lab, cluster.client, cluster.node1
    target = addr(cluster.b1, family)  # on node 2: client -> node1 -> node2 -> pod (asymmetric)
    [r] = lab.probe(client, "tcp", target, TCP, timeout=0.5)
    assert r.error == "unreachable"  # the client has no route to pods by default
    cidr = "10.244.0.0/16" if family == 4 else "fd00:10:244::/48"
    lab.ip(client, f"route add {cidr} via {addr(node1, family)} dev eth0")
    try:
        for proto in ("tcp", "udp"):
            [r] = lab.probe(client, proto, target, port_of(proto))
            assert (r.error, r.pod, r.peer) == (None, "b1", addr(client, family))
    finally:
        lab.ip(client, f"route del {cidr}")


@FAMILIES
@PROTOS
def test_closed_port_is_refused(cluster: Cluster, proto: str, family: int) -> None:
    [r] = cluster.lab.probe(cluster.node2, proto, addr(cluster.a1, family), 9999)
    assert r.error == "refused"
    assert r.pod is None


@PROTOS
def test_many_quick_connections(cluster: Cluster, proto: str) -> None:
    results = cluster.lab.probe(cluster.client, proto, cluster.node1.ipv4, 1, count=1)
    assert results[0].error == "refused"  # the node itself runs no server
    results = cluster.lab.probe(cluster.a2, proto, cluster.b1.ipv6, port_of(proto), count=300)
    assert len(results) == 300
    assert {r.pod for r in results} == {"b1"}
    assert {r.error for r in results} == {None}


def test_udp_answer_leaves_from_the_address_it_was_sent_to(cluster: Cluster) -> None:
    # A host-network server on node2 answering a pod of node2: the route back to the pod would
    # pick the gateway address as source; the echo server must reply from the node address.
    lab, node = cluster.lab, cluster.node2
    pod = lab.add_pod(node, "b2", tcp=(), udp=())
    proc = lab.start_echo(node, "node2-host", udp=(5300,), tcp=(5300,))
    try:
        for family in (4, 6):
            for proto in ("tcp", "udp"):
                [r] = lab.probe(pod, proto, addr(node, family), 5300)
                assert (r.error, r.pod, r.peer) == (None, "node2-host", addr(pod, family))
    finally:
        proc.kill()
        lab.remove_pod(pod)
    assert pod.netns not in list_netns()


def test_echo_servers_are_children_of_the_lab(cluster: Cluster) -> None:
    # Echo servers exit once getppid() differs from --parent-pid (the lab died): so the server
    # must be our direct child (`ip netns exec` execs it), or it would quit within 0.5 s.
    [pid] = _server_pids_in(cluster.a1.netns)
    status = Path(f"/proc/{pid}/status").read_text()
    ppid = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("PPid:"))
    assert ppid == os.getpid()


def _server_pids_in(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=True).stdout
    return [int(p) for p in out.split()]


def _server_pids(lab: NetLab) -> list[int]:
    return [pid for ns in lab.namespaces for pid in _server_pids_in(ns)]


def _alive(pid: int) -> bool:
    """Running (a zombie, killed but not yet reaped by its parent, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _wait_for_pids(lab: NetLab, n: int, timeout: float = 10.0) -> list[int]:
    """The processes in the lab's namespaces, once there are ``n``: a process started by
    `ip netns exec` enters its namespace a moment after it is started (long under load)."""
    deadline = time.monotonic() + timeout
    while len(pids := _server_pids(lab)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def test_close_removes_namespaces_and_processes() -> None:
    lab = NetLab()
    node = lab.add_node("n", 3)
    lab.add_pod(node, "p", tcp=(80,), udp=(53,))
    sleeper = lab.popen(node, "sleep", "60")
    pids = _wait_for_pids(lab, 2)
    assert len(pids) == 2
    assert sleeper.pid in pids
    assert len(lab.namespaces) == 3
    lab.close()
    lab.close()  # idempotent
    assert not [n for n in list_netns() if n.startswith(lab.prefix + "-")]
    assert not [p for p in pids if _alive(p)]
    assert not os.path.exists(lab.tmpdir)
    with pytest.raises(NetLabError):
        lab.add_node("again", 4)


def test_failures_during_setup_still_clean_up() -> None:
    with pytest.raises(NetLabError, match="echo server of bad failed"), NetLab() as lab:
        node = lab.add_node("n", 3)
        with pytest.raises(ValueError):
            lab.add_node("n", 4)  # duplicate name
        with pytest.raises(ValueError):
            lab.add_client("c", 3)  # lan index taken
        with pytest.raises(ValueError):
            lab.add_pod(node, "Bad_Name")
        lab.add_pod(node, "bad", tcp=(80, 80))  # the second bind fails
    assert not [n for n in list_netns() if n.startswith(lab.prefix + "-")]


def test_cleanup_stale_only_takes_dead_labs(cluster: Cluster) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"np{dead.pid}zz-x"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        removed = cleanup_stale()
    finally:
        subprocess.run(["ip", "netns", "del", stale], check=False, capture_output=True)
    assert stale in removed
    assert stale not in list_netns()
    assert cluster.lab.namespaces[0] in list_netns()  # the live lab is untouched
