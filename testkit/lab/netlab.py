"""A small "cluster" of network namespaces for real-packet tests and demos.

Topology (every namespace name starts with the lab's unique prefix, e.g. ``np4242a-``)::

    <prefix>-lan      bridge br0: the node network 198.18.0.0/24, fd00:198:18::/64
      |-- p<i> <-veth-> eth0 in <prefix>-<node>    198.18.0.<i>, fd00:198:18::<i>
      |                   |-- veth<n> <-veth-> eth0 in <prefix>-<pod>
      |                   |     node side 10.244.<i>.1/32, fd00:10:244:<i>::1/128 (gateway)
      |                   |     pod side  10.244.<i>.<n>/32, fd00:10:244:<i>::<n>/128
      |-- p<c> <-veth-> eth0 in <prefix>-<client> 198.18.0.<c>, fd00:198:18::<c>

Nodes forward (ip_forward, IPv6 forwarding, rp_filter off), route the service ranges 10.96.0.0/16
and fd00:10:96::/112 out of eth0 (a real node would use its default route), and reach the other
nodes' pod CIDRs via their lan address. Clients route 198.19.0.0/16 and fd00:198:19::/64
(LoadBalancer/external IPs) via one node. Pods run :mod:`testkit.lab.echo`.

Veth pairs are always created inside the lab's namespaces (``ip -n NS link add ... peer ... netns
OTHER``), so nothing ever appears in the caller's network namespace; interface names therefore
only need to be unique within a namespace and are short and fixed (eth0, veth<n>, p<i>, br0).
:meth:`NetLab.close` (also run by a finalizer) kills the lab's processes and deletes its
namespaces; :func:`cleanup_stale` removes what a crashed run left behind.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testkit.process import pid_alive

__all__ = [
    "Client",
    "Host",
    "NetLab",
    "NetLabError",
    "Node",
    "Pod",
    "ProbeResult",
    "bare_netns",
    "cleanup_stale",
    "list_netns",
]

LAN4 = "198.18.0.0/24"
LAN6 = "fd00:198:18::/64"
SERVICE4 = "10.96.0.0/16"
SERVICE6 = "fd00:10:96::/112"
EXTERNAL4 = "198.19.0.0/16"
EXTERNAL6 = "fd00:198:19::/64"
CLUSTER4 = "10.244.0.0/16"
CLUSTER6 = "fd00:10:244::/48"

_HERE = Path(__file__).resolve().parent
ECHO_SCRIPT = _HERE / "echo.py"
PROBE_SCRIPT = _HERE / "probe.py"
SWEEP_SCRIPT = _HERE / "sweep.py"
# The helper scripts are standard-library only: -I -S skips site-packages (~20 ms instead of
# ~120 ms per start), which matters because every probe() call starts one.
PY = (sys.executable, "-I", "-S")

# ICMP errors must not be rate limited: tests count "refused" answers (also those of nft `reject`),
# and the per-peer ICMP token bucket is shared with redirects, which silently ate port
# unreachables for a second after a node hairpinned a client's packet.
_SYSCTL_ICMP = {
    "net.ipv4.icmp_ratelimit": "0",
    "net.ipv4.icmp_msgs_per_sec": "100000",
    "net.ipv4.icmp_msgs_burst": "100000",
    "net.ipv6.icmp.ratelimit": "0",
}
# No redirects: a node forwarding a client's packet back out of eth0 (client -> node1 -> node2)
# must not teach the client a shortcut that bypasses node1.
_SYSCTL_NO_REDIRECTS = {
    "net.ipv4.conf.all.send_redirects": "0",
    "net.ipv4.conf.default.send_redirects": "0",
    "net.ipv4.conf.all.accept_redirects": "0",
    "net.ipv4.conf.default.accept_redirects": "0",
    "net.ipv6.conf.all.accept_redirects": "0",
    "net.ipv6.conf.default.accept_redirects": "0",
}
_SYSCTL_HOST = {
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
    **_SYSCTL_ICMP,
    **_SYSCTL_NO_REDIRECTS,
}

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_counter = itertools.count()


class NetLabError(RuntimeError):
    """A lab command failed; the message carries the command and its stderr."""


@dataclass(frozen=True)
class Host:
    """Anything with its own network namespace and a dual-stack address."""

    name: str
    netns: str
    ipv4: str
    ipv6: str


@dataclass(frozen=True)
class Node(Host):
    index: int
    lan: str  # the node's interface on the lan (in its namespace)
    pod_cidr4: str
    pod_cidr6: str
    gateway4: str  # the address every pod of this node uses as its default gateway
    gateway6: str


@dataclass(frozen=True)
class Pod(Host):
    node: Node
    host_iface: str  # the node-side veth, in the node's namespace
    tcp: tuple[int, ...]
    udp: tuple[int, ...]


@dataclass(frozen=True)
class Client(Host):
    index: int
    lan: str
    via: Node


@dataclass(frozen=True)
class ProbeResult:
    """One probe attempt: who answered (``pod``), which client address it saw (``peer``) and on
    which port, or why not (``error``: "refused", "timeout", "unreachable", "reset", other)."""

    pod: str | None = None
    peer: str | None = None
    error: str | None = None
    port: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProbeResult:
        def s(key: str) -> str | None:
            v = data.get(key)
            return None if v is None else str(v)

        port = data.get("port")
        return cls(pod=s("pod"), peer=s("peer"), error=s("error"), port=port if isinstance(port, int) else None)


NetnsRef = str | Host


def _ns(netns: NetnsRef) -> str:
    return netns.netns if isinstance(netns, Host) else netns


def _run(
    argv: list[str], *, input: str | None = None, timeout: float = 30.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        cmd = " ".join(argv)
        detail = (proc.stderr or proc.stdout).strip()
        if input:
            cmd += f" <<< {input.strip()!r}"
        raise NetLabError(f"{cmd} failed ({proc.returncode}): {detail}")
    return proc


def list_netns() -> list[str]:
    """Names of all named network namespaces (``ip netns list``)."""
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _netns_pids(netns: str) -> list[int]:
    out = _run(["ip", "netns", "pids", netns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_netns_processes(namespaces: Iterable[str]) -> None:
    """SIGKILL whatever still runs inside these (lab-owned) namespaces."""
    for netns in namespaces:
        for pid in _netns_pids(netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _delete_netns(namespaces: list[str]) -> None:
    if not namespaces:
        return
    _run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {n}\n" for n in namespaces), check=False)
    existing = set(list_netns())
    for n in namespaces:
        if n in existing:
            _run(["ip", "netns", "del", n], check=False)


def _terminate(procs: list[subprocess.Popen[bytes]], grace: float = 2.0) -> None:
    """SIGTERM each still-running process group, SIGKILL what is left after ``grace``."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in alive:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for p in procs:
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _teardown(procs: list[subprocess.Popen[bytes]], namespaces: list[str], tmpdir: str) -> None:
    # Module-level (not a method) so that weakref.finalize does not keep the lab alive.
    try:
        _terminate(procs)
    finally:
        try:
            _kill_netns_processes(namespaces)
            _delete_netns(list(reversed(namespaces)))
        finally:
            procs.clear()
            namespaces.clear()
            shutil.rmtree(tmpdir, ignore_errors=True)


@contextlib.contextmanager
def bare_netns(prefix: str) -> Iterator[str]:
    """An empty network namespace (no links but lo) named ``<prefix>-<random>``, deleted after."""
    name = f"{prefix}-{os.urandom(4).hex()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def cleanup_stale(prefix: str = "np") -> list[str]:
    """Delete namespaces left by crashed labs (``<prefix><pid><letters>-*`` whose pid is dead).

    Processes still running inside them are killed first (echo servers also exit by themselves
    once the lab process is gone), and the labs' temporary directories are removed. Labs of live
    processes, including this one, are left alone. Returns the deleted namespace names.
    """
    pat = re.compile(rf"^{re.escape(prefix)}(\d+)[a-z]+-")

    def stale(name: str) -> bool:
        m = pat.match(name)
        if m is None:
            return False
        pid = int(m.group(1))
        return pid != os.getpid() and not pid_alive(pid)

    names = [n for n in list_netns() if stale(n)]
    _kill_netns_processes(names)
    _delete_netns(names)
    tmp = Path(tempfile.gettempdir())
    for d in tmp.glob(f"{prefix}*-*"):
        if d.is_dir() and stale(d.name):
            shutil.rmtree(d, ignore_errors=True)
    return names


def _letters(n: int) -> str:
    s = ""
    while True:
        s = chr(ord("a") + n % 26) + s
        n //= 26
        if n == 0:
            return s


class NetLab:
    """A lab of network namespaces; use as a context manager (or call :meth:`close`)."""

    def __init__(self, prefix: str = "np") -> None:
        if not re.fullmatch(r"[a-z]{1,4}-?", prefix):
            raise ValueError("prefix must be 1-4 lowercase letters, optionally followed by '-'")
        existing = list_netns()
        while True:
            self.prefix = f"{prefix}{os.getpid()}{_letters(next(_counter))}"
            if not any(n.startswith(self.prefix + "-") for n in existing):
                break
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.clients: dict[str, Client] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._pod_procs: dict[str, subprocess.Popen[bytes]] = {}
        self._namespaces: list[str] = []
        self._pod_index: dict[str, Iterator[int]] = {}
        self._lan_indexes: set[int] = set()
        self._logs: dict[int, str] = {}
        self.tmpdir = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        self._finalizer = weakref.finalize(self, _teardown, self._procs, self._namespaces, self.tmpdir)
        try:
            self.lan = self._add_netns("lan")
            self._sysctl(self.lan, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
            self._ip(
                self.lan, "link set lo up", "link add br0 type bridge mcast_snooping 0 stp_state 0", "link set br0 up"
            )
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> NetLab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Kill the lab's processes and delete all its namespaces. Idempotent."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def namespaces(self) -> list[str]:
        return list(self._namespaces)

    # ----------------------------------------------------------------- commands

    def exec(
        self,
        netns: NetnsRef,
        *argv: str,
        check: bool = True,
        timeout: float = 30.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``netns`` (a name or a Node/Pod/Client), capturing text output."""
        return _run(["ip", "netns", "exec", _ns(netns), *argv], input=input, timeout=timeout, check=check)

    def popen(
        self,
        netns: NetnsRef,
        *argv: str,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside ``netns`` in the background (own process group).

        The process is tracked: :meth:`close` sends SIGTERM to its group, SIGKILL after 2 s.
        """
        self._check_open()
        proc = subprocess.Popen(
            ["ip", "netns", "exec", _ns(netns), *argv],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
        self._procs.append(proc)
        return proc

    def probe(
        self,
        netns: NetnsRef,
        proto: str,
        host: str,
        port: int,
        *,
        count: int = 1,
        timeout: float = 1.0,
        source: str | None = None,
        source_port: int = 0,
    ) -> list[ProbeResult]:
        """``count`` fresh connections from ``netns`` to host:port, in one subprocess."""
        argv = [*PY, str(PROBE_SCRIPT), "--proto", proto, "--count", str(count), "--timeout", str(timeout)]
        if source:
            argv += ["--source", source]
        if source_port:
            argv += ["--source-port", str(source_port)]
        argv += ["--", host, str(port)]
        out = self.exec(netns, *argv, timeout=count * timeout + 30.0).stdout
        return [ProbeResult.from_json(r) for r in json.loads(out)]

    def sweep(
        self, netns: NetnsRef, sources_from: str, count: int, targets: Iterable[tuple[str, int]], source_port: int
    ) -> dict[str, dict[str, str | None]]:
        """One UDP datagram from each of ``count`` source addresses (from ``sources_from``, owned
        by ``netns``) to each target, in one subprocess (testkit.lab.sweep): target "host:port"
        -> source -> the pod that answered (None: no answer)."""
        argv = [*PY, str(SWEEP_SCRIPT), "--sources-from", sources_from, "--count", str(count)]
        argv += ["--source-port", str(source_port), *(x for host, port in targets for x in (host, str(port)))]
        out = self.exec(netns, *argv, timeout=120.0 + count / 50).stdout
        result: dict[str, dict[str, str | None]] = json.loads(out)
        return result

    def ip(self, netns: NetnsRef, *lines: str) -> None:
        """Run ``ip`` commands (one per argument, without the leading ``ip``) in ``netns``."""
        self._ip(_ns(netns), *lines)

    def bridge_pod(self, node: Node, pod: Pod, bridge: str = "cbr0") -> None:
        """Moves ``pod``'s node side onto a bridge (its veth a port of it, the gateway address on
        the bridge): packets from the pod then come in on ``bridge`` (kube-proxy's
        detectLocalMode BridgeInterface)."""
        self.ip(
            node,
            f"link add {bridge} type bridge",
            f"link set {bridge} up",
            f"addr del {node.gateway4}/32 dev {pod.host_iface}",
            f"addr del {node.gateway6}/128 dev {pod.host_iface}",
            f"link set {pod.host_iface} master {bridge}",
            f"addr add {node.gateway4}/32 dev {bridge}",
            f"route replace {pod.ipv4}/32 dev {bridge}",
        )

    # ----------------------------------------------------------------- topology

    def add_node(self, name: str, index: int) -> Node:
        """A forwarding node on the lan; pod CIDRs 10.244.<index>.0/24, fd00:10:244:<index>::/64."""
        self._check_open()
        if not 1 <= index <= 254:
            raise ValueError("node index must be in 1..254")
        self._claim_lan_index(index)
        netns = self._add_netns(name)
        node = Node(
            name=name,
            netns=netns,
            ipv4=f"198.18.0.{index}",
            ipv6=f"fd00:198:18::{index}",
            index=index,
            lan="eth0",
            pod_cidr4=f"10.244.{index}.0/24",
            pod_cidr6=f"fd00:10:244:{index}::/64",
            gateway4=f"10.244.{index}.1",
            gateway6=f"fd00:10:244:{index}::1",
        )
        self._sysctl(
            netns,
            {
                "net.ipv4.ip_forward": "1",
                "net.ipv6.conf.all.forwarding": "1",  # also sets default.forwarding
                **_SYSCTL_HOST,
            },
        )
        self._attach_to_lan(netns, index)
        lines = [
            f"route add {SERVICE4} dev eth0",
            f"route add {SERVICE6} dev eth0",
        ]
        for other in self.nodes.values():
            lines += [
                f"route add {other.pod_cidr4} via {other.ipv4} dev eth0",
                f"route add {other.pod_cidr6} via {other.ipv6} dev eth0",
            ]
        self._ip(netns, *lines)
        for other in self.nodes.values():
            self._ip(
                other.netns,
                f"route add {node.pod_cidr4} via {node.ipv4} dev eth0",
                f"route add {node.pod_cidr6} via {node.ipv6} dev eth0",
            )
        self.nodes[name] = node
        self._pod_index[name] = iter(range(2, 255))
        return node

    def add_pod(
        self,
        node: Node,
        name: str,
        tcp: Iterable[int] = (8080,),
        udp: Iterable[int] = (5353,),
        ready_timeout: float = 10.0,
    ) -> Pod:
        """A pod namespace behind ``node`` running the echo server; returns once it listens."""
        self._check_open()
        if self.nodes.get(node.name) != node:
            raise ValueError(f"{node.name} is not a node of this lab")
        try:
            n = next(self._pod_index[node.name])
        except StopIteration:
            raise NetLabError(f"node {node.name} has no pod addresses left") from None
        netns = self._add_netns(name)
        tcp, udp = tuple(tcp), tuple(udp)
        # Start the server first (it binds wildcard addresses): its interpreter starts while
        # the interfaces are being configured.
        proc = self.start_echo(netns, name, tcp=tcp, udp=udp, wait=False)
        self._pod_procs[name] = proc
        self._sysctl(netns, {"net.ipv6.conf.default.accept_dad": "0", **_SYSCTL_ICMP})
        pod = Pod(
            name=name,
            netns=netns,
            ipv4=f"10.244.{node.index}.{n}",
            ipv6=f"fd00:10:244:{node.index}::{n}",
            node=node,
            host_iface=f"veth{n}",
            tcp=tcp,
            udp=udp,
        )
        veth = pod.host_iface
        self._ip(
            node.netns,
            f"link add {veth} type veth peer name eth0 netns {netns}",
            f"link set {veth} up",
            f"addr add {node.gateway4}/32 dev {veth}",
            f"addr add {node.gateway6}/128 dev {veth} nodad",
        )
        self._ip(
            netns,
            "link set lo up",
            "link set eth0 up",
            f"addr add {pod.ipv4}/32 dev eth0",
            f"addr add {pod.ipv6}/128 dev eth0 nodad",
            f"route add default via {node.gateway4} dev eth0 onlink",
            f"route add ::/0 via {node.gateway6} dev eth0 onlink",
        )
        self._ip(node.netns, f"route add {pod.ipv4}/32 dev {veth}", f"route add {pod.ipv6}/128 dev {veth}")
        self._wait_ready(proc, name, ready_timeout)
        self.pods[name] = pod
        return pod

    def start_echo(
        self,
        netns: NetnsRef,
        name: str,
        tcp: Iterable[int] = (),
        udp: Iterable[int] = (),
        *,
        wait: bool = True,
        ready_timeout: float = 10.0,
    ) -> subprocess.Popen[bytes]:
        """Start an echo server answering as ``name`` in any lab namespace (e.g. a node, for
        host-network endpoints). With ``wait`` it returns once all ports listen."""
        fd, log_path = tempfile.mkstemp(prefix=f"echo-{name}-", suffix=".log", dir=self.tmpdir)
        argv = [*PY, str(ECHO_SCRIPT), "--name", name, "--parent-pid", str(os.getpid())]
        argv += [a for p in tcp for a in ("--tcp", str(p))]
        argv += [a for p in udp for a in ("--udp", str(p))]
        with os.fdopen(fd, "wb") as log:
            proc = self.popen(netns, *argv, stdout=subprocess.PIPE, stderr=log)
        self._logs[proc.pid] = log_path
        if wait:
            self._wait_ready(proc, name, ready_timeout)
        return proc

    def remove_pod(self, pod: Pod) -> None:
        """Stop the pod's server and delete its namespace (its veth and routes go with it)."""
        proc = self._pod_procs.pop(pod.name, None)
        if proc is not None:
            _terminate([proc])
            self._procs.remove(proc)
        _kill_netns_processes([pod.netns])
        _delete_netns([pod.netns])
        self._namespaces.remove(pod.netns)
        self.pods.pop(pod.name, None)

    def add_client(self, name: str, index: int, via: Node | None = None) -> Client:
        """A host on the lan routing 198.19.0.0/16 and fd00:198:19::/64 via ``via`` (node 1)."""
        self._check_open()
        if via is None:
            by_index = {n.index: n for n in self.nodes.values()}
            if not by_index:
                raise NetLabError("add a node before a client (or pass via=)")
            via = by_index.get(1) or next(iter(self.nodes.values()))
        if not 1 <= index <= 254:
            raise ValueError("client index must be in 1..254")
        self._claim_lan_index(index)
        netns = self._add_netns(name)
        client = Client(
            name=name,
            netns=netns,
            ipv4=f"198.18.0.{index}",
            ipv6=f"fd00:198:18::{index}",
            index=index,
            lan="eth0",
            via=via,
        )
        self._sysctl(netns, _SYSCTL_HOST)
        self._attach_to_lan(netns, index)
        self._ip(
            netns, f"route add {EXTERNAL4} via {via.ipv4} dev eth0", f"route add {EXTERNAL6} via {via.ipv6} dev eth0"
        )
        self.clients[name] = client
        return client

    # ----------------------------------------------------------------- internals

    def _check_open(self) -> None:
        if self.closed:
            raise NetLabError("lab is closed")

    def _claim_lan_index(self, index: int) -> None:
        if index in self._lan_indexes:
            raise ValueError(f"lan index {index} is taken")
        self._lan_indexes.add(index)

    def _add_netns(self, name: str) -> str:
        if not _NAME_RE.match(name):
            raise ValueError(f"bad name {name!r}: use [a-z0-9-], up to 40 characters")
        netns = f"{self.prefix}-{name}"
        if netns in self._namespaces:
            raise ValueError(f"name {name!r} is already used in this lab")
        _run(["ip", "netns", "add", netns])
        self._namespaces.append(netns)
        return netns

    def _ip(self, netns: str, *lines: str) -> None:
        _run(["ip", "-n", netns, "-batch", "-"], input="".join(f"{ln}\n" for ln in lines))

    def _sysctl(self, netns: str, values: Mapping[str, str]) -> None:
        _run(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())])

    def _attach_to_lan(self, netns: str, index: int) -> None:
        """veth p<index> (on the lan bridge) <-> eth0 in ``netns`` with the lan addresses."""
        self._ip(
            self.lan,
            f"link add p{index} type veth peer name eth0 netns {netns}",
            f"link set p{index} master br0",
            f"link set p{index} up",
        )
        self._ip(
            netns,
            "link set lo up",
            "link set eth0 up",
            f"addr add 198.18.0.{index}/24 dev eth0",
            f"addr add fd00:198:18::{index}/64 dev eth0 nodad",
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], name: str, timeout: float) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NetLabError(f"echo server of {name} not ready after {timeout}s")
            readable, _, _ = select.select([fd], [], [], left)
            if readable:
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                buf += chunk
        proc.stdout.close()
        if not buf.startswith(b"READY"):
            proc.wait(timeout=5)
            log = Path(self._logs[proc.pid]).read_text(errors="replace").strip()
            raise NetLabError(f"echo server of {name} failed (rc={proc.returncode}): {log}")
