"""Localhost NodePorts: the userspace proxy against a direct connection, side by side in one run.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench localhost_proxy`` (``--bytes``
per bulk transfer, default 256 MiB; ``--rounds`` 3; ``--connections`` 3000; ``--parallel`` 4).

A node namespace and a pod namespace behind a veth pair (both ``lhnp-…``); the pod runs a
threaded TCP server (bench/localhost_proxy_peer.py); the proxy (nftproxy/localhost_proxy/, as
``nftproxy run --netns`` runs it: an event loop in this process, its sockets made in the node's
namespace) serves 127.0.0.1:NODEPORT there with the pod as its one endpoint. Clients run in the
node namespace, each figure twice: to the pod directly (the kernel alone: what a NodePort on a
node IP costs after its DNAT, minus the DNAT) and to 127.0.0.1:NODEPORT through the proxy:

* bulk: one connection sends ``--bytes`` and half-closes, the server answers the count (up); the
  server sends ``--bytes`` (down); MB/s of the median round;
* connection rate: ``--connections`` short connections one after the other (connect, a request
  line, the answer, close), then the same split over ``--parallel`` client processes;
  connections/s, and the sequential ones' p50/p99 latency;
* the proxy's CPU time (this process's, the loop thread's) per MB and per connection.

Both paths share the 2 cores with the server and the client processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from bench.figures import figure
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.localhost_proxy import LocalhostNodePorts
from nftproxy.operator.metrics import Metrics
from testkit.lab.netlab import bare_netns

T = TypeVar("T")
PEER = Path(__file__).with_name("localhost_proxy_peer.py")
POD_IP, POD_PORT = "10.201.0.2", 8080
NODEPORT = 46080
PATHS = {"direct": (POD_IP, POD_PORT), "proxy": ("127.0.0.1", NODEPORT)}


def ip(netns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", netns, *args], check=True)


def peer(netns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", netns, sys.executable, "-I", "-S", str(PEER), *args]


@contextmanager
def node_with_pod() -> Iterator[str]:
    """A node namespace and a pod namespace (veth), the pod serving; yields the node's name."""
    with bare_netns("lhnp") as node, bare_netns("lhnp") as pod:
        ip(node, "link", "set", "lo", "up")
        ip(pod, "link", "set", "lo", "up")
        ip(node, "link", "add", "veth0", "type", "veth", "peer", "name", "eth0", "netns", pod)
        ip(node, "addr", "add", "10.201.0.1/24", "dev", "veth0")
        ip(node, "link", "set", "veth0", "up")
        ip(pod, "addr", "add", f"{POD_IP}/24", "dev", "eth0")
        ip(pod, "link", "set", "eth0", "up")
        server = subprocess.Popen(peer(pod, "serve", POD_IP, str(POD_PORT)), stdout=subprocess.DEVNULL)
        try:
            yield node
        finally:
            server.kill()
            server.wait()


class Proxy:
    """The localhost NodePort proxy in an event loop thread of this process, as in nftproxy run."""

    def __init__(self, netns: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxy", daemon=True)
        self.thread.start()
        self.proxy = LocalhostNodePorts(netns, Metrics())
        spec = LocalhostNodePort(NODEPORT, "bench/target", "http", "random", 0, False, ((POD_IP, str(POD_PORT)),), ())
        self.run(self.proxy.update({4: {NODEPORT: spec}}))
        if not self.proxy.listeners:
            raise RuntimeError(f"the proxy could not listen on 127.0.0.1:{NODEPORT}")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.run(self.proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # the proxy's thread (the others wait)
    return r.ru_utime + r.ru_stime


def client(node: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(peer(node, *args), capture_output=True, text=True, check=True).stdout
    return dict(json.loads(out))


def measured(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and the CPU seconds this process (the proxy) spent meanwhile."""
    before = cpu()
    return fn(), cpu() - before


def parallel(node: str, host: str, port: int, connections: int, clients: int) -> tuple[int, float]:
    """``clients`` processes sharing ``connections``: (answered, seconds of the slowest client's
    loop; their start-up is left out)."""
    each = connections // clients
    procs = [
        subprocess.Popen(peer(node, "rr", host, str(port), str(each)), stdout=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    return sum(int(o["ok"]) for o in outs), max(float(o["wall"]) for o in outs)


def wait_ready(node: str) -> None:
    deadline = time.monotonic() + 30
    for host, port in PATHS.values():
        while client(node, "rr", host, str(port), "1")["ok"] != 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host}:{port} does not answer")
            time.sleep(0.2)


def measure(node: str, host: str, port: int, args: argparse.Namespace) -> dict[str, float]:
    """Every figure of one path (the proxy's CPU: meaningful for the proxy path only)."""
    mb = args.bytes / 1e6
    r: dict[str, float] = {}
    for way in ("up", "down"):
        res, spent = measured(partial(client, node, way, host, str(port), str(args.bytes), str(args.rounds)))
        r[f"{way}_mbps"] = mb / statistics.median(res["rounds"])
        r[f"{way}_cpu_ms_per_100mb"] = spent / (mb * args.rounds) * 100 * 1e3
    res, spent = measured(partial(client, node, "rr", host, str(port), str(args.connections)))
    if res["ok"] != args.connections:
        raise RuntimeError(f"{host}:{port}: {args.connections - res['ok']} connections failed")
    lat = sorted(res["latencies"])
    r["rate_1"] = res["ok"] / res["wall"]
    r["p50_us"] = statistics.median(lat) * 1e6
    r["p99_us"] = lat[int(len(lat) * 0.99) - 1] * 1e6
    r["rr_cpu_us_per_conn"] = spent / res["ok"] * 1e6
    ok, wall = parallel(node, host, port, args.connections, args.parallel)
    r["rate_n"] = ok / wall
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bytes", type=int, default=256 << 20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--parallel", type=int, default=4)
    args = p.parse_args()
    rows: dict[str, dict[str, float]] = {}
    with node_with_pod() as node:
        proxy = Proxy(node)
        try:
            wait_ready(node)
            client(node, "rr", *map(str, PATHS["proxy"]), "200")  # warm-up
            client(node, "rr", *map(str, PATHS["direct"]), "200")
            for path, (host, port) in PATHS.items():
                rows[path] = measure(node, host, port, args)
        finally:
            proxy.close()
    d, x = rows["direct"], rows["proxy"]
    print(f"localhost NodePort proxy vs direct, in a netns; {args.bytes >> 20} MiB x {args.rounds} per bulk figure, "
          f"{args.connections} short connections per rate figure")  # fmt: skip
    print(f"{'':<34}{'direct':>12}{'proxy':>12}{'proxy/direct':>14}")
    lines = [
        ("bulk up (client -> pod), MB/s", "up_mbps", "MB/s"),
        ("bulk down (pod -> client), MB/s", "down_mbps", "MB/s"),
        ("connections/s, 1 client", "rate_1", "conn/s"),
        (f"connections/s, {args.parallel} clients", "rate_n", "conn/s"),
        ("latency p50, µs", "p50_us", "µs"),
        ("latency p99, µs", "p99_us", "µs"),
    ]
    for label, key, unit in lines:
        print(f"{label:<34}{d[key]:>12.0f}{x[key]:>12.0f}{x[key] / d[key]:>13.2f}x")
        figure(key, d[key], unit, path="direct")
        figure(key, x[key], unit, path="proxy")
    print(f"proxy CPU: {x['up_cpu_ms_per_100mb']:.0f} ms per 100 MB up, {x['down_cpu_ms_per_100mb']:.0f} ms "
          f"per 100 MB down, {x['rr_cpu_us_per_conn']:.0f} µs per connection")  # fmt: skip
    for key, unit in (("up_cpu_ms_per_100mb", "ms"), ("down_cpu_ms_per_100mb", "ms"), ("rr_cpu_us_per_conn", "µs")):
        figure(key, x[key], unit, path="proxy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
