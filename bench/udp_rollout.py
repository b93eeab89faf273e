"""UDP rollout: stale conntrack entries deleted by `conntrack` processes vs over ctnetlink.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench udp_rollout`` (``--rounds`` 3 per
implementation, interleaved; ``--flows`` 1000; ``--endpoints`` 100).

A netlab (namespaces ``ctnl-…``): one node, three pod namespaces: ``old`` and ``new`` each hold
``--endpoints`` extra addresses (10.244.200.x and 10.244.201.x, routed by the node to the pod's
veth; the echo server answers from the address it was sent to), and the client ``c``. A UDP
ClusterIP Service (10.96.7.53:53 -> 5353) has the ``old`` addresses as endpoints; the client opens
``--flows`` UDP sockets (distinct source ports), each sending to the ClusterIP: every flow is a
conntrack entry DNATed to one of the old endpoints (about 10 per endpoint). Then, in one
EndpointSlice change, all endpoints are replaced by the ``new`` addresses and the proxy syncs.
The old pod keeps answering: a flow moves only once its entry is deleted.

The proxy is a child process (a ``Dataplane`` over ``KernelBackend`` in the node's namespace, as
``nftproxy run`` drives it); the sync's start and end are taken there (CLOCK_MONOTONIC, shared),
with its CPU (``getrusage``: itself + its waited-for children). Meanwhile this process sends one
datagram on each flow not yet moved, every ``--interval`` (10 ms), and notes when the first answer
from ``new`` arrives. Figures per implementation (median of the rounds):

* ``moved_s``: sync start -> every flow answered by a new endpoint;
* ``sync_s``: the whole sync (ruleset + cleanup), ``cleanup_s``: its conntrack part;
* ``cpu_s``: the proxy's CPU for the sync, children included; ``processes``: children started.

``subprocess``: the pre-ctnetlink code (one ``conntrack -L``, then one ``conntrack -D`` per
(frontend, endpoint) pair), kept here only (bench-only switch, patched into the child);
``netlink``: nftproxy/nft/conntrack.py. Needs the ``conntrack`` CLI for the former.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from ipaddress import ip_address, ip_network
from typing import Any, TypeVar

from bench.figures import figure
from nftproxy.nft import conntrack
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.objects import Family, UdpFlow

T = TypeVar("T")
VIP, PORT, TARGET = "10.96.7.53", 53, 5353
IMPLS = ("subprocess", "netlink")
OLD, NEW = "10.244.200", "10.244.201"


# ---------------------------------------------------------------- the old implementation (bench only)

_spawned = [0]


def _old_udp_flows(family: Family) -> list[UdpFlow]:
    argv = ["conntrack", "-L", "-p", "udp", "-f", "ipv4" if family is Family.IP else "ipv6"]
    _spawned[0] += 1
    text = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout
    out = []
    for line in text.splitlines():
        fields: dict[str, list[str]] = {}
        for word in line.split():
            name, eq, value = word.partition("=")
            if eq:
                fields.setdefault(name, []).append(value)
        dst, dport, src = fields.get("dst", []), fields.get("dport", []), fields.get("src", [])
        if len(dst) >= 2 and len(src) >= 2 and dport and src[1] != dst[0]:
            out.append(UdpFlow(dst[0], dport[0], src[1]))
    return out


def _old_delete_udp_flows(family: Family, flows: Iterable[UdpFlow]) -> None:
    for f in flows:
        argv = ["conntrack", "-D", "-f", "ipv4" if family is Family.IP else "ipv6", "-p", "udp"]
        argv += ["--orig-dst", f.orig_dst, "--orig-port-dst", f.orig_dport, "--reply-src", f.reply_src]
        _spawned[0] += 1
        subprocess.run(argv, capture_output=True, check=False, timeout=10)


# ---------------------------------------------------------------- the proxy (child process)


def _slice(prefix: str, n: int) -> Any:
    from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice  # noqa: PLC0415

    eps = tuple(Endpoint(f"{prefix}.{i}", True, True, False, "node1") for i in range(1, n + 1))
    return EndpointSlice("default", "dns-1", "dns", "IPv4", (EndpointPort("dns", "UDP", TARGET),), eps)


def proxy_child(impl: str, netns: str, node_ip: str, endpoints: int) -> int:
    """Line protocol on stdin/stdout: READY, then GO -> one JSON line of the measured sync."""
    from nftproxy.compiler import ProxyConfig  # noqa: PLC0415
    from nftproxy.dataplane.sync import Dataplane  # noqa: PLC0415
    from nftproxy.model.types import Service, ServicePort  # noqa: PLC0415
    from nftproxy.nft.conntrack import KernelConntrack  # noqa: PLC0415
    from nftproxy.nft.kernel import KernelBackend  # noqa: PLC0415

    class SubprocessConntrack(KernelConntrack):
        """Conntrack as it was before ctnetlink: `conntrack` children of the worker thread (they
        start in its network namespace)."""

        def udp_flows(self, family: Family) -> list[UdpFlow]:
            return self._worker.call(lambda: _old_udp_flows(family))

        def delete_udp_flows(self, family: Family, flows: Iterable[UdpFlow]) -> int:
            todo = sorted(set(flows))
            if todo:
                self._worker.call(lambda: _old_delete_udp_flows(family, todo))
            return len(todo)

    cfg = ProxyConfig(node_name="node1", node_ips=(ip_address(node_ip),), cluster_cidrs=(ip_network("10.244.0.0/16"),))
    backend = KernelBackend(netns)
    ct = SubprocessConntrack(netns) if impl == "subprocess" else KernelConntrack(netns)
    dp = Dataplane(backend, cfg, ct)
    dp.inputs.set_service(
        Service("default", "dns", "ClusterIP", (ip_address(VIP),), (ServicePort("dns", "UDP", PORT),))
    )
    dp.inputs.set_slice(_slice(OLD, endpoints))
    dp.sync()
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        return 1
    _spawned[0] = 0
    r0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    dp.inputs.set_slice(_slice(NEW, endpoints))
    result = dp.sync()
    t1 = time.monotonic()
    r1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(r0, r1, strict=True))
    c = result.cleanups[0] if result.cleanups else None
    out = {
        "t0": t0,
        "t1": t1,
        "cpu": cpu,
        "processes": _spawned[0],
        "cleanup_s": c.seconds if c else None,
        "deleted": c.deleted if c else None,
        "failed": c.failed if c else None,
    }
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    backend.close()
    ct.close()
    return 0


# ---------------------------------------------------------------- the lab and the clients


def in_netns(netns: str, fn: Callable[[], T]) -> T:
    out: list[Any] = []

    def run() -> None:
        try:
            netns_mod.enter(netns)
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]  # type: ignore[no-any-return]


def open_flows(netns: str, n: int) -> list[socket.socket]:
    def make() -> list[socket.socket]:
        socks = []
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.connect((VIP, PORT))
            s.setblocking(False)
            socks.append(s)
        return socks

    return in_netns(netns, make)


def pods_of(data: bytes) -> list[str]:
    out = []
    for line in data.splitlines():
        with contextlib.suppress(ValueError, KeyError):
            out.append(json.loads(line)["pod"])
    return out


def drive(socks: list[socket.socket], want: str, interval: float, timeout: float) -> dict[int, float]:
    """Send on every flow not yet answered by ``want`` every ``interval``: when each was."""
    poll = select.epoll()
    index = {s.fileno(): i for i, s in enumerate(socks)}
    for fd in index:
        poll.register(fd, select.EPOLLIN)
    pending = set(range(len(socks)))
    at: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    try:
        while pending and time.monotonic() < deadline:
            for i in pending:
                with contextlib.suppress(OSError):  # an ICMP error of an earlier datagram: next pass
                    socks[i].send(b"x")
            end = time.monotonic() + interval
            while (left := end - time.monotonic()) > 0:
                for fd, _ in poll.poll(left):
                    i = index[fd]
                    while True:
                        try:
                            data = socks[i].recv(4096)
                        except (BlockingIOError, ConnectionRefusedError):
                            break
                        if want in pods_of(data) and i in pending:
                            at[i] = time.monotonic()
                            pending.discard(i)
                            poll.unregister(fd)
                            break
    finally:
        poll.close()
    return at


def flush_dnat(netns: str) -> None:
    """Every DNATed UDP entry of the node gone: each round starts from the same table."""
    in_netns(netns, lambda: conntrack.delete_entries(Family.IP, conntrack.udp_entries(Family.IP)))


def endpoints_with_flows(netns: str) -> int:
    return len({e.reply.src for e in in_netns(netns, lambda: conntrack.udp_entries(Family.IP))})


def one_round(lab: Any, impl: str, args: argparse.Namespace) -> dict[str, float]:
    node, client = lab.nodes["node1"], lab.pods["c"]
    flush_dnat(node.netns)
    argv = [sys.executable, "-m", "bench.udp_rollout", "--child", impl, node.netns, node.ipv4, str(args.endpoints)]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    socks: list[socket.socket] = []
    try:
        if child.stdout.readline().strip() != "READY":
            raise RuntimeError("the proxy did not start")
        socks = open_flows(client.netns, args.flows)
        if len(drive(socks, "old", 0.2, 20.0)) != args.flows:
            raise RuntimeError("not every flow reached an old endpoint")
        spread = endpoints_with_flows(node.netns)
        time.sleep(0.2)  # the client is idle when the sync starts
        child.stdin.write("GO\n")
        child.stdin.flush()
        moved = drive(socks, "new", args.interval, args.timeout)
        res = json.loads(child.stdout.readline())
        child.stdin.write("BYE\n")
        child.stdin.flush()
        child.wait(timeout=30)
    finally:
        for s in socks:
            s.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    if len(moved) != args.flows:
        raise RuntimeError(f"{impl}: {args.flows - len(moved)} flows never moved within {args.timeout}s")
    return {
        "moved_s": max(moved.values()) - res["t0"],
        "sync_s": res["t1"] - res["t0"],
        "cleanup_s": res["cleanup_s"],
        "cpu_s": res["cpu"],
        "processes": res["processes"],
        "deleted": res["deleted"],
        "spread": spread,
    }


def build_lab(endpoints: int) -> Any:
    from testkit.lab.netlab import NetLab, cleanup_stale  # noqa: PLC0415

    cleanup_stale("ctnl-")
    lab = NetLab("ctnl-")
    try:
        node = lab.add_node("node1", 1)
        for name, prefix in (("old", OLD), ("new", NEW)):
            pod = lab.add_pod(node, name, tcp=(), udp=(TARGET,))
            lab.ip(pod.netns, *(f"addr add {prefix}.{i}/32 dev eth0" for i in range(1, endpoints + 1)))
            lab.ip(node.netns, f"route add {prefix}.0/24 dev {pod.host_iface}")
        lab.add_pod(node, "c", tcp=(), udp=())
    except BaseException:
        lab.close()
        raise
    return lab


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return proxy_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--flows", type=int, default=1000)
    p.add_argument("--endpoints", type=int, default=100)
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    rows: dict[str, list[dict[str, float]]] = {impl: [] for impl in IMPLS}
    lab = build_lab(args.endpoints)
    try:
        for r in range(args.rounds):
            for impl in IMPLS if r % 2 == 0 else IMPLS[::-1]:
                got = one_round(lab, impl, args)
                rows[impl].append(got)
                print(f"round {r + 1} {impl:<10} " + " ".join(f"{k}={v:.4g}" for k, v in got.items()), flush=True)
    finally:
        lab.close()
    print(f"UDP rollout: {args.endpoints} endpoints replaced at once, {args.flows} open flows; "
          f"median of {args.rounds} rounds, client resolution {args.interval * 1e3:.0f} ms")  # fmt: skip
    print(f"{'':<42}{'subprocess':>12}{'netlink':>12}")
    lines = [
        ("sync start -> every flow moved, s", "moved_s", "s"),
        ("whole sync, s", "sync_s", "s"),
        ("  of which conntrack list + delete, s", "cleanup_s", "s"),
        ("proxy CPU for the sync (+ children), s", "cpu_s", "s"),
        ("child processes started", "processes", "count"),
        ("stale entries found", "deleted", "count"),
    ]
    for label, key, unit in lines:
        med = {impl: statistics.median(x[key] for x in rows[impl]) for impl in IMPLS}
        fmt = ">12.0f" if unit == "count" else ">12.3f"
        print(f"{label:<42}" + "".join(f"{med[impl]:{fmt}}" for impl in IMPLS))
        for impl in IMPLS:
            figure(key, med[impl], unit, impl=impl, flows=args.flows, endpoints=args.endpoints)
    spread = min(x["spread"] for xs in rows.values() for x in xs)
    print(f"(every round: the flows spread over at least {spread} of the {args.endpoints} old endpoints)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
