"""The data plane under load of Services: nftproxy vs the real kube-proxy (nftables and iptables
modes), side by side in one run.

Run: ``flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.datapath [--sizes 10,1000,10000,30000]``.

One kube-apiserver on loopback holds N Services (``--endpoints`` each, 1 by default, addresses
nothing answers on; written into etcd as bench.operator does, ``--via-api``: created through the
API) plus one probed Service whose endpoint is a real TCP server in a pod namespace. For each size
and each proxy in turn (a FRESH node namespace each, nothing left from the other):

* the proxy starts and syncs everything (its own sync metrics, then one connection answered);
* a client in the node namespace (traffic from the node: the output hook's DNAT, as a pod's
  traffic meets the prerouting one) opens ``--connections`` new TCP connections to the probed
  ClusterIP one after the other, each connect + one request + its answer + close;
* per connection: latency (p50/p99) and the CPU the packet path costs, as the system time of
  the client and of the server processes (netfilter runs in their syscalls' context and the
  softirqs they trigger on veth), divided by the connections.

kube-proxy runs through testkit.k8s.kubeproxy (API via an in-namespace forwarder); iptables mode
uses iptables-nft inside the namespace. All three use the same node name and cluster CIDR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from bench.apiserver import NS, SERVICE_RANGE, create_many, import_many, prepare, warm_up
from bench.figures import figure
from bench.runners import METRICS, NODE, KubeProxyRunner, NftproxyRunner, Runner
from nftproxy.operator import kube
from testkit.k8s import objects
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_get_in, parse_metrics, wait_synced
from testkit.lab.netlab import bare_netns
from testkit.process import cpu_user_system

PROBE_VIP, PROBE_PORT = "10.96.251.1", 80  # among the probes' addresses (bench.apiserver.cluster_ip), not the bulk's
POD_IP, POD_PORT = "10.200.0.2", 8080
CLIENT = Path(__file__).with_name("datapath_client.py")


def probed_objects() -> list[dict[str, Any]]:
    svc = objects.service("probed", [PROBE_VIP], [objects.port(PROBE_PORT, "http", target=POD_PORT)], namespace=NS)
    ep = objects.endpoint(POD_IP, node=NODE)
    return [svc, objects.endpoint_slice("probed-x", "probed", [ep], [objects.port(POD_PORT, "http")], namespace=NS)]


def ip(netns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", netns, *args], check=True)


@contextmanager
def node_with_pod(prefix: str = "dp") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A node namespace and a pod namespace behind a veth pair, the pod running an echo server
    (named PREFIXn-<random> and PREFIXp-<random>)."""
    with bare_netns(f"{prefix}n") as node, bare_netns(f"{prefix}p") as pod:
        ip(node, "link", "set", "lo", "up")
        ip(pod, "link", "set", "lo", "up")
        ip(node, "link", "add", "veth0", "type", "veth", "peer", "name", "eth0", "netns", pod)
        ip(node, "addr", "add", "10.200.0.1/24", "dev", "veth0")
        ip(node, "link", "set", "veth0", "up")
        ip(node, "route", "add", "10.96.0.0/12", "dev", "veth0")  # Service IPs: routed, then DNATed
        ip(pod, "addr", "add", f"{POD_IP}/24", "dev", "eth0")
        ip(pod, "link", "set", "eth0", "up")
        ip(pod, "route", "add", "default", "via", "10.200.0.1")
        server = subprocess.Popen(
            ["ip", "netns", "exec", pod, sys.executable, "-I", "-S", str(CLIENT), "serve", POD_IP, str(POD_PORT)],
            stdout=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            yield node, server
        finally:
            server.kill()
            server.wait()


def sys_seconds(pid: int) -> float:
    """System CPU time of a process and its waited-for children."""
    return cpu_user_system(pid, running_children=False)[1]


def run_client(node: str, count: int) -> dict[str, Any]:
    argv = [sys.executable, "-I", "-S", str(CLIENT), "connect", PROBE_VIP, str(PROBE_PORT), str(count)]
    out = subprocess.run(["ip", "netns", "exec", node, *argv], capture_output=True, text=True, check=True).stdout
    return cast(dict[str, Any], json.loads(out))


def measure(make: Callable[[str], Runner], connections: int, timeout: float, prefix: str = "dp") -> dict[str, float]:
    with node_with_pod(prefix) as (node, server):
        runner = make(node)
        since = time.time()
        runner.start()
        try:
            wait_synced(node, *METRICS, runner.prefix, since=since, timeout=timeout, quiet=1.0)
            deadline = time.monotonic() + 60
            while run_client(node, 1)["ok"] != 1:  # the probed Service answers
                if time.monotonic() > deadline:
                    raise RuntimeError("the probed Service never answered")
                time.sleep(0.5)
            run_client(node, 200)  # warm-up
            server_sys = sys_seconds(server.pid)
            res = run_client(node, connections)
            server_sys = sys_seconds(server.pid) - server_sys
            runner.pid()  # still running
            counted = counted_connections(node)
        finally:
            runner.stop()
    if res["ok"] != connections:
        raise RuntimeError(f"{connections - res['ok']} of {connections} connections failed")
    lat = sorted(res["latencies"])
    if counted is not None and counted < connections:  # --service-counters: its own /metrics
        raise RuntimeError(f"nftproxy_service_connections_total counted {counted} of {connections} connections")
    return {
        "p50_us": statistics.median(lat) * 1e6,
        "p99_us": lat[int(len(lat) * 0.99) - 1] * 1e6,
        "sys_us_per_conn": (res["sys_seconds"] + server_sys) / connections * 1e6,
    }


def counted_connections(node: str) -> float | None:
    """The probed ClusterIP's new connections as the proxy's /metrics counts them (None: not counted,
    the proxy runs without --service-counters)."""
    _, body = http_get_in(node, *METRICS, "/metrics")
    for name, value in parse_metrics(body).items():
        probed = 'service="probed"' in name and 'kind="ClusterIP"' in name
        if name.startswith("nftproxy_service_connections_total{") and probed:
            return value
    return None


COUNTERS = "nftproxy-counters"  # --proxies: nftproxy run --service-counters


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="10,1000,10000,30000")
    p.add_argument("--connections", type=int, default=3000)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--proxies", default="nftproxy,kube-proxy-nftables,kube-proxy-iptables")
    p.add_argument("--endpoints", type=int, default=1, help="endpoints of each bulk Service (default 1)")
    p.add_argument("--via-api", action="store_true", help="create the bulk through the API (default: into etcd)")
    p.add_argument("--netns-prefix", default="dp", help="name the namespaces PREFIXn-/PREFIXp-<random> (default dp)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    proxies = args.proxies.split(",")
    work = Path(tempfile.mkdtemp(prefix="datapath-bench-"))
    print(
        f"data plane: new TCP connections to one ClusterIP among N Services ({args.endpoints} endpoint(s) each); "
        f"{args.connections}"
    )
    print("connections per figure, client in the node namespace; sys = client + server system CPU per connection")
    rows: dict[tuple[int, str], dict[str, float]] = {}
    with ControlPlane(service_cluster_ip_range=SERVICE_RANGE) as cp:
        prepare(cp, NODE)
        for obj in probed_objects():
            cp.kubectl("apply", "-f", "-", input=json.dumps(obj))
        api = kube.connect(str(cp.kubeconfig))
        have = 0
        print(f"{'Services':>9} {'proxy':<22}{'p50 µs':>9}{'p99 µs':>9}{'sys µs/conn':>13}", flush=True)
        for n in sizes:
            if args.via_api:
                create_many(api, have, n - 1, args.endpoints)  # + the probed one
            elif n - 1 > have:
                import_many(cp, have, n - 1, args.endpoints)  # as bench.operator: straight into etcd, then listed once
                warm_up(api)
            have = max(have, n - 1)
            for name in proxies:
                wd = work / f"{name}-{n}"
                wd.mkdir()

                def make(netns: str, name: str = name, wd: Path = wd) -> Runner:
                    if name == "nftproxy":
                        return NftproxyRunner(netns, cp, wd)
                    if name == COUNTERS:
                        return NftproxyRunner(netns, cp, wd, ("--service-counters",))
                    return KubeProxyRunner(netns, cp, wd, name.rsplit("-", 1)[1])

                r = rows[(n, name)] = measure(make, args.connections, args.timeout, args.netns_prefix)
                for what in ("p50_us", "p99_us", "sys_us_per_conn"):
                    figure(what, r[what], "µs", services=n, proxy=name)
                figures = f"{r['p50_us']:>9.0f}{r['p99_us']:>9.0f}{r['sys_us_per_conn']:>13.1f}"
                print(f"{n:>9} {name:<22}{figures}", flush=True)
    print("\nratios (same run):")
    if "nftproxy" in proxies and len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        ratio = rows[(hi, "nftproxy")]["p50_us"] / rows[(lo, "nftproxy")]["p50_us"]
        print(f"  nftproxy p50 at {hi} / at {lo} Services: {ratio:.3f}")
    for n in sizes:
        for other in proxies:
            if other not in ("nftproxy", COUNTERS) and "nftproxy" in proxies:
                a, b = rows[(n, other)], rows[(n, "nftproxy")]
                print(
                    f"  {n} Services: {other} / nftproxy: p50 {a['p50_us'] / b['p50_us']:.2f}x, "
                    f"sys per connection {a['sys_us_per_conn'] / b['sys_us_per_conn']:.2f}x"
                )
        if COUNTERS in proxies and "nftproxy" in proxies:
            a, b = rows[(n, COUNTERS)], rows[(n, "nftproxy")]
            print(
                f"  {n} Services: with --service-counters / without: p50 {a['p50_us'] / b['p50_us']:.3f}x, "
                f"sys per connection {a['sys_us_per_conn'] / b['sys_us_per_conn']:.3f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
