"""Operator benchmark: `nftproxy run` against a real kube-apiserver, rules read from the kernel.

Run: ``.venv/bin/python -m bench.operator [--sizes 1000,10000] [--rounds 30]``.
* start-to-synced: `nftproxy run` started (table deleted first) until its first sync is committed
  (the probed Service in `service-ips`: a first load makes every Service reachable in its last
  commit), median of --starts starts at each size;
* at start: a new Service (and its EndpointSlice) created 1 s after the process started, until
  it is reachable: its endpoints in the kernel (polled in its own endpoint map, `endpoints-5`)
  and the first sync committed (see write_at_start), same starts;
* the bulk of the Services is written straight into etcd (``import_many``; --via-api: created
  through the API, ~16 minutes for 50k here), the probed ones through the API;
* event-to-rule latency: an EndpointSlice update written to the API until the new endpoint is in
  the kernel's map (the kernel's own notification of the added element, `testkit.lab.nftwatch`: `nft
  monitor` dumps the whole ruleset first and fell behind at 50k), p50/p99 in steady state (from
  --settle seconds after the last start), with --min-sync-period 0 (and 1s with --period-1s);
  --rounds 0: none;
* operator RSS after the rounds (VmRSS, and VmHWM: the peak).
The node is a network namespace created and deleted here; the API is on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.apiserver import (
    AT_START_BASE,
    AT_START_ENDPOINTS,
    CRD,
    NS,
    PROBE_BASE,
    PROBE_ENDPOINTS,
    SERVICE_RANGE,
    cluster_ip,
    create_many,
    endpoint_slice,
    import_many,
    warm_up,
)
from bench.figures import figure
from nftproxy.nft.backend import NftError
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from nftproxy.operator import kube
from testkit import process
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.nftwatch import ElementWatch


class Node:
    def __init__(self, cp: ControlPlane, workdir: Path, netns_prefix: str = "ntbop") -> None:
        self.cp = cp
        self.netns = f"{netns_prefix}-{uuid.uuid4().hex[:6]}"
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
        self.nft = KernelBackend(self.netns)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "nftproxy.log"
        self.watch: ElementWatch | None = None
        self.synced_at: float | None = None  # perf_counter() of the first sync seen committed
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bench-node"},
                "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.1"}]}}  # fmt: skip
        cp.kubectl("apply", "-f", "-", input=json.dumps(node))

    def start(self, min_sync: str, probe_vip: str, at_start: Callable[[float], None] | None = None) -> float:
        """Start `nftproxy run`; return seconds until its first sync is committed: the probed
        Service is in `service-ips` (every dispatch element is in the last commit of a load).
        ``at_start`` runs in a thread, given the start time."""
        for family in Family:
            self.nft.delete(family, "nftproxy")
        self.synced_at = None
        t0 = time.perf_counter()
        if at_start is not None:
            threading.Thread(target=at_start, args=(t0,), daemon=True).start()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nftproxy", "run", "--node-name", "bench-node", "--kubeconfig",
             str(self.cp.kubeconfig), "--netns", self.netns, "--min-sync-period", min_sync,
             "--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0",
             "--status-period", "10s", "--log-level", os.environ.get("NFTPROXY_BENCH_LOG", "warning")],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nftproxy exited: {self.log.read_text()[-2000:]}")
            # `list map` of this one map costs ~5 ms while it is empty (`get element` and `list
            # tables` dump the whole table here: ~1.7 s at 10k, a core taken from the proxy).
            try:
                if f"{probe_vip} . tcp . 80 " in self.nft.run("list map ip nftproxy service-ips"):
                    self.synced_at = time.perf_counter()
                    synced = self.synced_at - t0
                    self._start_watch()  # not during the first load: 10^5 notifications
                    return synced
            except NftError:
                pass
            time.sleep(0.01)

    def _start_watch(self) -> None:
        """The kernel notifies every committed element addition (NFNLGRP_NFTABLES): the moment it
        arrives is the moment the rule is in the kernel, with no polling and no dump."""
        self.watch = ElementWatch(self.netns)

    def stop(self) -> None:
        if self.proc:
            self.proc.terminate()
            self.proc.wait(30)
            self.proc = None
        if self.watch:
            self.watch.close()
            self.watch = None

    def rss_mb(self) -> tuple[float, float]:
        assert self.proc
        return process.rss_mb(self.proc.pid), process.peak_rss_mb(self.proc.pid)

    def close(self) -> None:
        self.stop()
        self.nft.close()
        subprocess.run(["ip", "netns", "del", self.netns], check=False)


def latency(api: Any, node: Node, index: int, rounds: int, first_round: int = 1) -> list[float]:
    out = []
    for r in range(first_round, first_round + rounds):
        body = endpoint_slice(index, PROBE_ENDPOINTS, salt=1_000_000 + r * 10)
        # the new endpoints are new addresses: any one's value (address . port) in the map is the
        # whole change (one transaction)
        value = socket.inet_aton(body["endpoints"][0]["addresses"][0]) + struct.pack(">H", 8080) + b"\0\0"
        assert node.watch is not None
        node.watch.expect(f"endpoints-{PROBE_ENDPOINTS}", value)
        t0 = time.perf_counter()
        api.request("PUT", f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/s{index}-x", body=body)
        try:
            t1 = node.watch.wait(f"endpoints-{PROBE_ENDPOINTS}", value, 30)
        except TimeoutError:
            raise RuntimeError(f"round {r}: the new endpoints never reached the kernel") from None
        out.append(t1 - t0)
        time.sleep(0.05)
    return out


def write_at_start(api: Any, node: Node, index: int, out: list[float]) -> Callable[[float], None]:
    """Create Service ``index`` 1 s after the start; append the seconds until it is reachable:
    its endpoints in its own map, and the first sync committed (a change taken into the first
    load has its endpoints loaded a step before the dispatch maps, which come last; after the
    first sync, one transaction holds both)."""

    def run(t0: float) -> None:
        time.sleep(max(0.0, t0 + 1.0 - time.perf_counter()))
        t1 = time.perf_counter()
        create_many(api, index, index + 1, AT_START_ENDPOINTS)
        want = f"{cluster_ip(index)} . tcp . 80 . 0 "
        while time.perf_counter() - t1 < 60:
            try:
                if want in node.nft.run(f"list map ip nftproxy endpoints-{AT_START_ENDPOINTS}"):
                    seen = time.perf_counter()
                    while node.synced_at is None and time.perf_counter() - t1 < 60:
                        time.sleep(0.005)
                    out.append(max(seen, node.synced_at or float("nan")) - t1)
                    return
            except NftError:
                pass
            time.sleep(0.01)
        out.append(float("nan"))

    return run


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="1000,10000")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--starts", type=int, default=3, help="starts per size (start->synced, at-start write)")
    p.add_argument("--settle", type=float, default=20.0, help="seconds from the last start to steady-state rounds")
    p.add_argument("--period-1s", action="store_true", help="also measure with --min-sync-period 1s")
    p.add_argument("--via-api", action="store_true", help="create the bulk through the API (default: into etcd)")
    p.add_argument("--netns-prefix", default="ntbop", help="name the node's namespace PREFIX-<random> (default ntbop)")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="nftproxy-bench-"))
    print(f"nftproxy operator benchmark (Services x 10 endpoints; real kube-apiserver on loopback; log in {work})")
    head: tuple[str, ...] = ("Services", "min-sync", "start->synced s", "(min-max)", "at start ms", "p50 ms")
    head += ("p99 ms", "RSS MB", "peak MB")
    widths = (9, 9, 16, 12, 12, 8, 8, 7, 8)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    with ControlPlane(service_cluster_ip_range=SERVICE_RANGE) as cp:
        cp.kubectl("apply", "-f", str(CRD))
        cp.kubectl("create", "namespace", NS)
        api = kube.connect(str(cp.kubeconfig))
        node = Node(cp, work, args.netns_prefix)
        at_index = AT_START_BASE
        try:
            have = 0
            for n in sizes:
                t0 = time.perf_counter()
                if args.via_api:
                    create_many(api, have, n, 10)
                else:
                    import_many(cp, have, n, 10)
                if not args.via_api:
                    warm_up(api)
                probe = PROBE_BASE + sizes.index(n)
                create_many(api, probe, probe + 1, PROBE_ENDPOINTS)  # the probed Service
                have = n
                print(f"  (created {n} Services + EndpointSlices in {time.perf_counter() - t0:.0f}s)", flush=True)
                for min_sync in ("0", "1s") if args.period_1s else ("0",):
                    starts: list[float] = []
                    at_start: list[float] = []
                    for k in range(args.starts if min_sync == "0" else 1):
                        if k:
                            node.stop()
                        hook = write_at_start(api, node, at_index, at_start)
                        at_index += 1
                        t0 = time.perf_counter()
                        starts.append(node.start(min_sync, cluster_ip(probe), hook))
                        while len(at_start) < len(starts) and time.perf_counter() - t0 < 90:
                            time.sleep(0.05)
                        now, top = node.rss_mb()
                        print(f"  start {k + 1}: synced after {starts[-1]:.2f} s, the Service created at 1 s "
                              f"in the kernel {at_start[-1] * 1000:.0f} ms later; RSS {now:.0f} MB (peak {top:.0f})",
                              flush=True)  # fmt: skip
                    time.sleep(max(0.0, t0 + args.settle - time.perf_counter()))
                    rounds = args.rounds if min_sync == "0" else max(5, args.rounds // 3)
                    lat = latency(api, node, probe, rounds, first_round=2) if rounds else [float("nan")]
                    rss, peak = node.rss_mb()
                    node.stop()
                    spread = f"{min(starts):.2f}-{max(starts):.2f}"
                    labels = {"services": n, "min_sync_period": min_sync}
                    figure("start -> first sync (median)", statistics.median(starts), "s", **labels)
                    figure("Service at start -> kernel (median)", statistics.median(at_start), "s", **labels)
                    figure("write -> kernel p50", pct(lat, 0.5), "s", **labels)
                    figure("write -> kernel p99", pct(lat, 0.99), "s", **labels)
                    figure("RSS", rss, "MB", **labels)
                    figure("peak RSS", peak, "MB", **labels)
                    print(
                        f"{n:>9} {min_sync:>9} {statistics.median(starts):>16.2f} {spread:>12} "
                        f"{statistics.median(at_start) * 1000:>12.0f} {pct(lat, 0.5) * 1000:>8.1f} "
                        f"{pct(lat, 0.99) * 1000:>8.1f} {rss:>7.0f} {peak:>8.0f}",
                        flush=True,
                    )
        finally:
            node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
