"""loadBalancerSourceRanges and NodePort rejects as kube-proxy v1.37's nftables proxier does them,
with real TCP and UDP connections on the real kernel (the node's table programmed by a Dataplane
on the kernel backend, in the node's namespace):

* source ranges judge new connections only: a TCP connection and a UDP flow open when the ranges
  are tightened (or added) to exclude their client go on; a new connection from it is dropped;
* a range holding the node's IP lets the LoadBalancer IPs in as sources too (kube-proxy's
  allowFromNode): a node that holds the VIP on an interface connects from it (kube-vip);
* the node's own connection to its NodePort without endpoints is refused on the way in: a
  connected UDP socket gets ECONNREFUSED, not EPERM from send(); TCP: connection refused.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.netns import call_in
from testkit.k8s import objects as k
from testkit.lab.netlab import EXTERNAL4, EXTERNAL6, Client, Host, NetLab, Node, Pod, cleanup_stale

pytestmark = pytest.mark.netns

PREFIX = "fwnp-"
LINES = 7000  # a1's line server: answers every line on one connection (the echo server answers once)
PORTS = [k.port(80, "lines", target=LINES), k.port(53, "dns", "UDP", target=5353)]
SLICE_PORTS = [k.port(LINES, "lines"), k.port(5353, "dns", "UDP")]
LB = {4: "198.19.3.17", 6: "fd00:198:19::3:17"}
VIP_IN_RANGE = {4: "198.19.3.40", 6: "fd00:198:19::3:40"}  # held by the node; a range holds the node's IP
VIP_NOT_IN_RANGE = {4: "198.19.3.41", 6: "fd00:198:19::3:41"}  # held by the node; no range holds its IP
NODE_PORTS = {"tcp": 30080, "udp": 30053}
WAIT = 1.0  # seconds: an answer takes milliseconds, a dropped packet the whole wait
# An IPv6 SYN's ICMP port unreachable can come back while connect() still holds the socket: the
# kernel keeps it as a soft error (TcpExtLockDroppedIcmps) and the SYN sent again after 1 s is
# refused. Refusals are waited for longer than that.
REFUSAL_WAIT = 3.0
EPERM = "PermissionError: [Errno 1] Operation not permitted"


class LineServer:
    """A TCP server in a pod's namespace that answers as the echo server does on connect (one JSON
    line: ``pod``, ``peer``), then the same line to every line the client sends, until the
    connection or the server is closed."""

    def __init__(self, pod: Pod, port: int) -> None:
        self.name = pod.name
        self.sock = call_in(
            pod.netns, lambda: socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
        )
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return  # closed
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn, peer[0]), daemon=True).start()

    def _serve(self, conn: socket.socket, peer: str) -> None:
        answer = (json.dumps({"pod": self.name, "peer": peer.removeprefix("::ffff:")}) + "\n").encode()
        with contextlib.suppress(OSError), conn:
            conn.sendall(answer)
            for _ in conn.makefile("rb"):
                conn.sendall(answer)

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def open_socket(src: Host, proto: str, host: str, port: int) -> socket.socket:
    """A connected socket in ``src``'s namespace (TCP: connected, the server's first line read)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    def make() -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
        sock.settimeout(WAIT)
        try:
            sock.connect((host, port))
            if proto == "tcp":
                assert sock.recv(4096).endswith(b"\n")  # the whole first line: nothing left to read
        except BaseException:
            sock.close()
            raise
        return sock

    return call_in(src.netns, make)


def talk(sock: socket.socket) -> str:
    """One line there and its answer back on an open socket (the server sends nothing unasked):
    the pod that answered, or the error (TimeoutError: dropped; ConnectionRefusedError;
    PermissionError: refused by our own node's output)."""
    try:
        sock.send(b"ping\n")
        data = sock.recv(4096)
    except OSError as e:
        return type(e).__name__
    return str(json.loads(data.split(b"\n", 1)[0])["pod"]) if data else "closed"


@dataclass
class Lab:
    lab: NetLab
    node: Node
    a1: Pod
    ext: Client  # 198.18.0.100, fd00:198:18::100
    ext2: Client  # 198.18.0.101, fd00:198:18::101
    dp: Dataplane

    def apply(self, *objs: k.Obj) -> None:
        got = classify(list(objs))
        assert not got.skipped, got.skipped
        for svc in got.services:
            self.dp.inputs.set_service(svc)
        for sl in got.slices:
            self.dp.inputs.set_slice(sl)
        self.dp.sync()

    @contextlib.contextmanager
    def programmed(self, *objs: k.Obj) -> Iterator[None]:
        """``objs`` applied for the block, then deleted (the next test starts from none)."""
        self.apply(*objs)
        try:
            yield
        finally:
            got = classify(list(objs))
            for svc in got.services:
                self.dp.inputs.delete_service(svc.key)
            for sl in got.slices:
                self.dp.inputs.delete_slice(sl.key)
            self.dp.sync()

    def new(self, src: Host, proto: str, host: str, port: int, wait: float = WAIT) -> list[str]:
        """Two new connections (fresh sockets, fresh source ports): who answered, or the error."""
        return [r.pod or str(r.error) for r in self.lab.probe(src, proto, host, port, count=2, timeout=wait)]

    def dropped(self, src: Host, proto: str) -> list[str]:
        """What two new connections our node drops get: a timeout; the node's own UDP send()
        fails at once (EPERM: dropped in output, as by kube-proxy's filter-output-pre-dnat)."""
        return [EPERM if src == self.node and proto == "udp" else "timeout"] * 2

    def host(self, name: str) -> Host:
        return {"ext": self.ext, "ext2": self.ext2, "node": self.node}[name]


def one_host(h: Host, family: int) -> str:
    return f"{h.ipv4}/32" if family == 4 else f"{h.ipv6}/128"


def lb(name: str, n: int, lb_ips: list[str], ranges: list[str] | None) -> k.Obj:
    """A dual-stack LoadBalancer with ClusterIPs 10.96.3.N, fd00:10:96::3:N."""
    spec: dict[str, Any] = {"loadBalancerSourceRanges": ranges} if ranges is not None else {}
    return k.service(
        name, [f"10.96.3.{n}", f"fd00:10:96::3:{n}"], PORTS, type="LoadBalancer", lb_ips=lb_ips,
        ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack", **spec,
    )  # fmt: skip


def slices(name: str, pod: Pod) -> list[k.Obj]:
    return [
        k.endpoint_slice(f"{name}-4", name, [k.endpoint(pod.ipv4, node="node1")], SLICE_PORTS),
        k.endpoint_slice(f"{name}-6", name, [k.endpoint(pod.ipv6, node="node1")], SLICE_PORTS, address_type="IPv6"),
    ]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    cleanup_stale(PREFIX)
    with NetLab(PREFIX) as nl:
        node = nl.add_node("node1", 1)
        a1 = nl.add_pod(node, "a1", tcp=(8080,), udp=(5353,))
        ext, ext2 = nl.add_client("ext", 100, via=node), nl.add_client("ext2", 101, via=node)
        # the node's own connections to LoadBalancer IPs are routed (a real node's default route),
        # then DNATed in output; it holds two VIPs itself, as with kube-vip. The IPv6 ones are
        # deprecated (preferred_lft 0): else, sharing the longest prefix with the other LoadBalancer
        # IPs, they would be the source of the node's connections to those too (RFC 6724 rule 8);
        # to a VIP itself the node still connects from the VIP (rule 1)
        nl.ip(
            node,
            f"route add {EXTERNAL4} via {ext.ipv4}",
            f"route add {EXTERNAL6} via {ext.ipv6}",
            *(f"addr add {vip[4]}/32 dev eth0" for vip in (VIP_IN_RANGE, VIP_NOT_IN_RANGE)),
            *(f"addr add {vip[6]}/128 dev eth0 nodad preferred_lft 0" for vip in (VIP_IN_RANGE, VIP_NOT_IN_RANGE)),
        )
        server = LineServer(a1, LINES)
        backend = KernelBackend(node.netns)
        config = ProxyConfig(
            node_name="node1",
            node_ips=(ip_address(node.ipv4), ip_address(node.ipv6)),
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
        )
        try:
            yield Lab(nl, node, a1, ext, ext2, Dataplane(backend, config))
        finally:
            server.close()
            backend.close()


# -- source ranges judge new connections only ------------------------------------------------


@pytest.mark.parametrize("change", ["tightened", "added"])
@pytest.mark.parametrize("client", ["ext", "node"])
@pytest.mark.parametrize("family", [4, 6])
def test_open_connections_outlive_source_ranges_that_exclude_their_client(
    lab: Lab, family: int, client: str, change: str
) -> None:
    """As kube-proxy (``ct state new jump firewall-check``): a TCP connection and a UDP flow from
    outside (filter-prerouting) or from the node itself (filter-output) go on when the ranges
    stop holding their client; a new connection from it is dropped, and ext2, listed, gets in."""
    src, vip = lab.host(client), LB[family]
    name = f"fw-{client}-{change}"
    before = [one_host(src, family), one_host(lab.ext2, family)] if change == "tightened" else None
    with lab.programmed(lb(name, 10, [LB[4], LB[6]], before), *slices(name, lab.a1)):
        with open_socket(src, "tcp", vip, 80) as tcp, open_socket(src, "udp", vip, 53) as udp:
            assert (talk(tcp), talk(udp)) == ("a1", "a1")
            lab.apply(lb(name, 10, [LB[4], LB[6]], [one_host(lab.ext2, family)]))
            # the open ones go on (before: their next packets dropped, a UDP send from the node EPERM)
            assert (talk(tcp), talk(udp)) == ("a1", "a1")
            assert (talk(tcp), talk(udp)) == ("a1", "a1")
        assert lab.new(src, "tcp", vip, 80) == lab.dropped(src, "tcp")
        assert lab.new(src, "udp", vip, 53) == lab.dropped(src, "udp")
        assert lab.new(lab.ext2, "tcp", vip, 80) == ["a1", "a1"]
        assert lab.new(lab.ext2, "udp", vip, 53) == ["a1", "a1"]


# -- allowFromNode -------------------------------------------------------------------------------


def route_source(lab: Lab, host: str) -> str:
    """The source address the node's kernel picks for a connection to ``host``."""
    out = lab.lab.exec(lab.node, "ip", "-j", "route", "get", host).stdout
    return str(json.loads(out)[0]["prefsrc"])


@pytest.mark.parametrize("family", [4, 6])
def test_a_node_holding_the_vip_connects_from_it_when_a_range_holds_the_nodes_ip(lab: Lab, family: int) -> None:
    """kube-proxy's allowFromNode: a range holds the node's IP, so the LoadBalancer IPs are
    allowed sources too; the node's connection to a VIP it holds leaves from the VIP and gets in.
    Where no range holds the node's IP, the same connection is dropped."""
    node_net = "198.18.0.0/24" if family == 4 else "fd00:198:18::/64"  # the node's IP (and ext's)
    objs = [
        lb("fw-vip-in-range", 40, [VIP_IN_RANGE[4], VIP_IN_RANGE[6]], [node_net]),
        *slices("fw-vip-in-range", lab.a1),
        lb("fw-vip-not-in-range", 41, [VIP_NOT_IN_RANGE[4], VIP_NOT_IN_RANGE[6]], [one_host(lab.ext, family)]),
        *slices("fw-vip-not-in-range", lab.a1),
    ]
    with lab.programmed(*objs):
        for vip in (VIP_IN_RANGE[family], VIP_NOT_IN_RANGE[family]):
            assert route_source(lab, vip) == vip  # the node connects to a VIP it holds from the VIP
            assert route_source(lab, LB[family]) == (lab.node.ipv4 if family == 4 else lab.node.ipv6)  # others: no
            assert lab.new(lab.ext, "tcp", vip, 80) == ["a1", "a1"]  # listed in both
            assert lab.new(lab.ext2, "tcp", vip, 80) == (
                ["a1", "a1"] if vip == VIP_IN_RANGE[family] else ["timeout", "timeout"]
            )
        for proto, port in (("tcp", 80), ("udp", 53)):
            assert lab.new(lab.node, proto, VIP_IN_RANGE[family], port) == ["a1", "a1"]
            assert lab.new(lab.node, proto, VIP_NOT_IN_RANGE[family], port) == lab.dropped(lab.node, proto)


# -- the node's own NodePort without endpoints ----------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
def test_the_nodes_own_nodeport_without_endpoints_is_refused_not_eperm(lab: Lab, family: int) -> None:
    """As kube-proxy, whose nodeport-endpoints-check only filter-input reaches: the node's packet
    to its NodePort with no endpoints goes out through lo and is rejected on the way in, so a
    connected UDP socket gets ICMP port unreachable (ECONNREFUSED) where send() failed with EPERM
    when filter-output rejected it. TCP connects are refused, as before; from outside: refused."""
    name = "fw-np-empty"
    svc = k.service(
        name, ["10.96.3.99", "fd00:10:96::3:99"],
        [k.port(80, "lines", node_port=NODE_PORTS["tcp"]), k.port(53, "dns", "UDP", node_port=NODE_PORTS["udp"])],
        type="NodePort", ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack",
    )  # fmt: skip
    empty = [
        k.endpoint_slice(f"{name}-4", name, [], SLICE_PORTS),
        k.endpoint_slice(f"{name}-6", name, [], SLICE_PORTS, address_type="IPv6"),
    ]
    node_ip = lab.node.ipv4 if family == 4 else lab.node.ipv6
    with lab.programmed(svc, *empty):
        for proto, port in NODE_PORTS.items():
            assert lab.new(lab.node, proto, node_ip, port, REFUSAL_WAIT) == ["refused", "refused"], proto
            assert lab.new(lab.ext, proto, node_ip, port, REFUSAL_WAIT) == ["refused", "refused"], proto
        with open_socket(lab.node, "udp", node_ip, NODE_PORTS["udp"]) as udp:  # WAIT: UDP is refused at once
            udp.send(b"ping\n")  # the datagram leaves (no EPERM) ...
            with pytest.raises(ConnectionRefusedError):
                udp.recv(4096)  # ... and the refusal comes back
