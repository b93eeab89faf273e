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
  the kernel's map (the kernel's own notification of the added element, `testkit.nftwatch`: `nft
  monitor` dumps the whole ruleset first and fell behind at 50k), p50/p99 in steady state (from
  --settle seconds after the last start), with --min-sync-period 0 (and 1s with --period-1s);
  --rounds 0: none;
* operator RSS after the rounds (VmRSS, and VmHWM: the peak).
The node is a network namespace created and deleted here; the API is on loopback.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from nftproxy.nft.kernel import KernelBackend, NftError
from nftproxy.nft.objects import Family
from nftproxy.operator import kube
from testkit.controlplane import ControlPlane
from testkit.nftwatch import ElementWatch

NS = "bench"
# The probed Service has its own endpoint count, so its map (endpoints-3) holds only its elements:
# `nft get element` on it stays cheap and the polling does not slow the proxy it measures.
PROBE_ENDPOINTS = 3
CRD = Path(__file__).resolve().parents[1] / "charts" / "nftproxy" / "crds" / "proxystatus.yaml"


PROBE_BASE = 1_000_000  # indexes of probed Services
AT_START_BASE = PROBE_BASE + 100  # indexes of the Services created 1 s after a start
AT_START_ENDPOINTS = 5  # their own endpoint count: their own map, cheap to poll


def cluster_ip(i: int) -> str:
    """10.96.1.0 on for the bulk (63,744 of them fit below the probes' 10.96.250.0, inside the
    control plane's 10.96.0.0/16: 50k Services included), 10.96.250.0 on for the probes."""
    assert i < 249 * 256 or i >= PROBE_BASE, i
    return str(IPv4Address("10.96.250.0") + i - PROBE_BASE if i >= PROBE_BASE else IPv4Address("10.96.1.0") + i)


def service(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"s{i}", "namespace": NS},
        "spec": {"clusterIP": cluster_ip(i), "ports": [{"name": "http", "port": 80}]},
    }


def endpoint_slice(i: int, endpoints: int, salt: int = 0) -> dict[str, Any]:
    base = int(IPv4Address("10.128.0.0")) + i * endpoints
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"s{i}-x", "namespace": NS, "labels": {"kubernetes.io/service-name": f"s{i}"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [str(IPv4Address(base + j + salt))], "conditions": {"ready": True}, "nodeName": f"n{j % 50}"}
            for j in range(endpoints)
        ],
    }


def create_many(api: Any, start: int, stop: int, endpoints: int, threads: int = 16) -> None:
    """Services ``start``..``stop``-1 and their EndpointSlices, created by ``threads`` threads, each
    with its own keep-alive HTTPS connection, plain JSON POSTs (half the client CPU of the
    generated CoreV1Api, measured). kube-apiserver's CPU is the limit: ~1.7 ms per object at
    first (2.8 s of its CPU for 1.6k objects, 0.6 s of etcd's), growing with the number of
    Services (its ClusterIP allocator): 50k Services + slices took 16 minutes, ~300 Services/s at
    first, ~30/s at 48k. For a big bulk, import_many."""
    cfg = api.configuration
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    url = urlsplit(cfg.host)
    local = threading.local()

    def post(path: str, body: dict[str, Any]) -> None:
        for attempt in range(5):
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPSConnection(url.hostname or "", url.port or 443, context=ctx)
            try:
                conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                local.conn = None
                if attempt == 4:
                    raise
                time.sleep(0.5)
                continue
            if resp.status == 409:  # already there (e.g. a retried request that had gone through)
                return
            if resp.status == 429 or resp.status >= 500:
                time.sleep(0.5)
                continue
            if resp.status >= 300:
                raise RuntimeError(f"POST {path}: {resp.status} {data[:300]!r}")
            return
        raise RuntimeError(f"POST {path}: still failing")

    def one(i: int) -> None:
        post(f"/api/v1/namespaces/{NS}/services", service(i))
        post(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", endpoint_slice(i, endpoints))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(start, stop)))


def _managed(api_version: str, now: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """metadata.managedFields as the apiserver writes it for a create by this client."""
    return [{"manager": "unknown", "operation": "Update", "apiVersion": api_version, "time": now,
             "fieldsType": "FieldsV1", "fieldsV1": fields}]  # fmt: skip


def stored(i: int, endpoints: int, now: str) -> list[tuple[str, dict[str, Any]]]:
    """Service ``i``, its EndpointSlice and its ClusterIP's IPAddress as kube-apiserver stores
    them after a create through the API (defaults and managedFields included, so the lists the
    proxy reads are the same bytes), by etcd key."""
    svc, sl = service(i), endpoint_slice(i, endpoints)
    ip = cluster_ip(i)
    svc["metadata"] |= {"uid": str(uuid.uuid4()), "creationTimestamp": now}
    svc["metadata"]["managedFields"] = _managed("v1", now, {"f:spec": {
        "f:clusterIP": {}, "f:internalTrafficPolicy": {}, "f:sessionAffinity": {}, "f:type": {},
        "f:ports": {".": {}, 'k:{"port":80,"protocol":"TCP"}': {
            ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}}})  # fmt: skip
    svc["spec"] = {"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 80}], "clusterIP": ip,
                   "clusterIPs": [ip], "type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": ["IPv4"],
                   "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"}  # fmt: skip
    svc["status"] = {"loadBalancer": {}}
    sl["metadata"] |= {"uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": now}
    sl["metadata"]["managedFields"] = _managed("discovery.k8s.io/v1", now, {
        "f:addressType": {}, "f:endpoints": {}, "f:ports": {},
        "f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/service-name": {}}}})  # fmt: skip
    address = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip, "uid": str(uuid.uuid4()), "creationTimestamp": now,
            "labels": {"ipaddress.kubernetes.io/ip-family": "IPv4",
                       "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"},
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": NS, "name": f"s{i}"}},
    }  # fmt: skip
    return [
        (f"/registry/services/specs/{NS}/s{i}", svc),
        (f"/registry/endpointslices/{NS}/s{i}-x", sl),
        (f"/registry/ipaddresses/{ip}", address),
    ]


def import_many(cp: ControlPlane, start: int, stop: int, endpoints: int, threads: int = 4) -> None:
    """Like create_many, written straight into etcd (transactions of 60-120 puts, JSON: the
    apiserver reads JSON and protobuf alike), its watch caches following through their etcd
    watches. Through the API, each create costs kube-apiserver time that grows with the number
    of Services (the ClusterIP allocator): 100k objects took 16 minutes (the rate fell from
    ~300 to ~30 Services/s by 48k); this takes seconds. For the bulk of a benchmark only: the
    objects a benchmark watches for go through the API."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    url = f"{cp.etcd_url}/v3/kv/txn"

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def put(batch: range, addresses: bool) -> None:
        ops = [{"requestPut": {"key": b64(key.encode()), "value": b64(json.dumps(obj).encode())}}
               for i in batch for key, obj in stored(i, endpoints, now)
               if key.startswith("/registry/ipaddresses/") == addresses]  # fmt: skip
        req = urllib.request.Request(url, json.dumps({"success": ops}).encode(), {"Content-Type": "application/json"})  # noqa: S310
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310  (our etcd, http)
            answer = json.load(resp)
        if not answer.get("succeeded"):
            raise RuntimeError(f"etcd txn failed: {answer}")

    batches = [range(a, min(stop, a + 60)) for a in range(start, stop, 60)]
    with ThreadPoolExecutor(threads) as pool:  # the IPAddresses first, or the apiserver's repair
        list(pool.map(lambda b: put(b, True), batches))  # loop "repairs" the Services it sees first
        list(pool.map(lambda b: put(b, False), batches))


class Node:
    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.netns = f"ntbop-{uuid.uuid4().hex[:6]}"
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
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def close(self) -> None:
        self.stop()
        self.nft.close()
        subprocess.run(["ip", "netns", "del", self.netns], check=False)


def latency(api: Any, node: Node, index: int, rounds: int, first_round: int = 1) -> list[float]:
    import kubernetes  # noqa: PLC0415

    disc = kubernetes.client.DiscoveryV1Api(api)
    out = []
    for r in range(first_round, first_round + rounds):
        body = endpoint_slice(index, PROBE_ENDPOINTS, salt=1_000_000 + r * 10)
        # the new endpoints are new addresses: any one's value (address . port) in the map is the
        # whole change (one transaction)
        value = socket.inet_aton(body["endpoints"][0]["addresses"][0]) + struct.pack(">H", 8080) + b"\0\0"
        assert node.watch is not None
        node.watch.expect(f"endpoints-{PROBE_ENDPOINTS}", value)
        t0 = time.perf_counter()
        disc.replace_namespaced_endpoint_slice(f"s{index}-x", NS, cast(Any, body))
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


def warm_up(api: Any) -> None:
    """List everything once, as the proxy will. Right after the bulk is written into etcd, the
    apiserver's first list of it is slower (measured at 50k, both lists one after the other:
    11.2 s, then 7.2-7.6 s every time after); the apiserver of a live cluster holds its objects
    long before a proxy starts."""
    for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
        for _ in kube.pages(api, path):
            pass


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
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="nftproxy-bench-"))
    print(f"nftproxy operator benchmark (Services x 10 endpoints; real kube-apiserver on loopback; log in {work})")
    head: tuple[str, ...] = ("Services", "min-sync", "start->synced s", "(min-max)", "at start ms", "p50 ms")
    head += ("p99 ms", "RSS MB", "peak MB")
    widths = (9, 9, 16, 12, 12, 8, 8, 7, 8)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", str(CRD))
        cp.kubectl("create", "namespace", NS)
        api = kube.api_client(str(cp.kubeconfig))
        node = Node(cp, work)
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
