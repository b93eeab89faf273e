"""CPU, memory, latency and API bytes under EndpointSlice churn: nftproxy against kube-proxy.

    flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench churn_vs_kubeproxy
        [--services 10000] [--rates 20,100] [--duration 300] [--proxies kube-proxy,nftproxy]
        [--profile-seconds 60] [--netns-prefix chb] [--forward-port 46100]

One kube-apiserver on loopback holds N Services x 10 endpoints (written into etcd as the API
stores them: bench.apiserver.import_many). For each rate, each proxy in turn (its default
``--min-sync-period`` 1 s, periodic 30 s) runs in a fresh network namespace against the SAME
stream of EndpointSlice writes: before each run the slices are put back as they were (into
etcd), the stream is drawn from the same seed, so both proxies see the same bodies in the same
order (only the trigger-time annotation differs).

The stream is rolling Deployments: RATE Services roll at once (RATE writes/s spread over them,
so each gets about one write a second); each pod replacement is three writes of its slice,
(1) a new pod's endpoint, not ready; (2) it turns ready and the oldest pod turns terminating
(ready false, serving true, terminating true); (3) the terminating endpoint is gone. After its
10 pods are replaced a Service hands its place to the next. Every write sets
``endpoints.kubernetes.io/last-change-trigger-time`` to the time it is sent (RFC 3339, UTC).

Measured over the churn (from its first write to its last):

* CPU seconds per minute of the proxy process, user and system apart (its own,
  plus that of reaped children and of children still running, testkit.process.cpu_user_system:
  kube-proxy's ``nft`` runs); kube-proxy's in-namespace API forwarder (testkit.lab.nsforward)
  and the counting forwarder below are not counted, nor the apiserver or etcd;
* RSS (VmRSS) of the proxy process at the start and end of the churn, and its peak (sampled
  every 10 s);
* network programming latency p50/p99: from a write (2)'s trigger time to the kernel's
  notification of the first nftables object carrying the newly ready address (a NETLINK_NETFILTER
  socket in the namespace, subscribed to the nftables group: nftproxy's endpoint-map element,
  kube-proxy's endpoint chain's rule and its service chain's vmap element; all of one
  transaction are notified at its commit). A write whose address never shows is counted apart;
* syncs: the delta of ``kubeproxy_sync_proxy_rules_duration_seconds_count`` (both export it);
  also both proxies' own ``kubeproxy_network_programming_duration_seconds`` sum/count;
* bytes the proxy received from the apiserver per minute: the proxy's kubeconfig points at a
  counting TCP forwarder on 127.0.0.1:``--forward-port`` in this namespace (bytes as they leave
  the apiserver: TLS records, HTTP/2 frames for kube-proxy, HTTP/1.1 chunks for nftproxy).

``--profile-seconds S`` adds one more nftproxy run at the highest rate for S seconds with
``py-spy record`` (``$PY_SPY`` or ``py-spy`` on PATH) attached, not measured, and prints where
its CPU went by category (JSON decode, kopf + aiohttp, parse, compile, netlink, ...).
Network namespaces are named ``<--netns-prefix>-<random>`` and deleted after.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import contextlib
import http.client
import itertools
import json
import os
import queue
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import yaml

import nftproxy
from bench.apiserver import NS, cluster_ip, import_many, prepare, stored
from bench.figures import figure
from bench.runners import METRICS, NODE, KubeProxyRunner, NftproxyRunner, Runner, kube_proxy_version
from testkit.k8s import objects
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_get_in, parse_metrics, wait_synced
from testkit.lab.netlab import bare_netns
from testkit.lab.nftwatch import _NEWSETELEM, NFNL_SUBSYS_NFTABLES, ElementWatch, _messages, _Watch, service_key
from testkit.process import cpu_user_system, rss_mb

TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
ENDPOINTS = 10
NEW_POD_BASE = int(IPv4Address("10.192.0.0"))  # the stream's new pods (the bulk is 10.128.0.0 on)
_NEWRULE = (NFNL_SUBSYS_NFTABLES << 8) | 6
_NEWCHAIN = (NFNL_SUBSYS_NFTABLES << 8) | 3


# ---------------------------------------------------------------------------------------------- pure parts


@dataclass
class Pod:
    address: str
    node: str
    state: str = "ready"  # "new" (not ready yet), "ready", "terminating"


@dataclass
class Rollout:
    """One Service's slice while its Deployment rolls: each ``step()`` is the next write."""

    index: int
    pods: list[Pod]
    replaced: int = 0  # pods replaced so far
    phase: int = 0  # 0: add a new pod; 1: it turns ready, the oldest ready turns terminating; 2: drop it

    def done(self) -> bool:
        return self.replaced >= ENDPOINTS and self.phase == 0

    def step(self, new_address: Callable[[], str]) -> str | None:
        """Advance one write; returns the address that turned ready by it (phase 1), else None."""
        if self.phase == 0:
            self.pods.append(Pod(new_address(), f"n{(self.index + self.replaced) % 50}", "new"))
            self.phase = 1
            return None
        if self.phase == 1:
            new = next(p for p in self.pods if p.state == "new")
            new.state = "ready"
            old = next(p for p in self.pods if p.state == "ready")
            old.state = "terminating"
            self.phase = 2
            return new.address
        self.pods = [p for p in self.pods if p.state != "terminating"]
        self.replaced += 1
        self.phase = 0
        return None

    def body(self, trigger: str) -> dict[str, Any]:
        eps = []
        for p in self.pods:
            if p.state == "new":
                eps.append(objects.endpoint(p.address, ready=False, serving=False, terminating=False, node=p.node))
            elif p.state == "ready":
                eps.append(objects.endpoint(p.address, node=p.node))
            else:
                eps.append(objects.endpoint(p.address, ready=False, serving=True, terminating=True, node=p.node))
        return objects.endpoint_slice(
            f"s{self.index}-x", f"s{self.index}", eps, [objects.port(8080, "http")], namespace=NS,
            metadata={"annotations": {TRIGGER: trigger}},
        )  # fmt: skip


def initial_pods(i: int) -> list[Pod]:
    """The pods of bench.apiserver.endpoint_slice(i, 10): what the bulk holds."""
    base = int(IPv4Address("10.128.0.0")) + i * ENDPOINTS
    return [Pod(str(IPv4Address(base + j)), f"n{j % 50}") for j in range(ENDPOINTS)]


@dataclass(frozen=True)
class Write:
    index: int  # the Service
    body: dict[str, Any]  # its slice after this write; the trigger time is set when it is sent
    ready: str | None  # the address this write makes ready, if any


def stream(services: int, concurrent: int, seed: int) -> Iterator[Write]:
    """The writes, in order: ``concurrent`` Services roll at once, round-robin; a finished one
    hands its place to the next Service of a shuffled order (all rolled: the order again, each
    from the pods it has then). Same arguments, same writes."""
    rng = random.Random(seed)
    order = list(range(services))
    rng.shuffle(order)
    pods: dict[int, list[Pod]] = {}
    counter = iter(range(1 << 30))
    position = iter(range(1 << 30))

    def new_address() -> str:
        return str(IPv4Address(NEW_POD_BASE + next(counter)))

    rolling: list[Rollout] = []

    def fresh() -> Rollout:
        busy = {r.index for r in rolling}
        while (i := order[next(position) % services]) in busy:  # a Service rolls once at a time
            pass
        return Rollout(i, pods.pop(i) if i in pods else initial_pods(i))

    for _ in range(min(concurrent, services)):
        rolling.append(fresh())
    while True:
        for k in range(len(rolling)):
            if rolling[k].done():
                pods[rolling[k].index] = rolling[k].pods
                rolling[k] = fresh()
            r = rolling[k]
            ready = r.step(new_address)
            yield Write(r.index, r.body(""), ready)


def rfc3339(t: float) -> str:
    """``t`` (time.time()) as the endpointslice controller writes the trigger time (RFC 3339, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pct(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (p in 0..1) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


def metric_sum(metrics: dict[str, float], name: str, family: str | None = None) -> float:
    """The sum of a metric's samples over its labels (only those of ``ip_family`` FAMILY, if given)."""
    return sum(
        v
        for k, v in metrics.items()
        if (k == name or k.startswith(name + "{")) and (family is None or f'ip_family="{family}"' in k)
    )


CATEGORIES = (
    # (category, substrings of a frame "function (file:line)"), the first that matches the
    # innermost frames wins, looked for from the innermost frame out
    ("JSON decode", ("json/decoder.py", "json/__init__.py", "(json)")),
    ("netlink / kernel", ("nftproxy/nft/",)),
    ("compile", ("nftproxy/compiler/",)),
    ("parse", ("nftproxy/model/",)),
    ("dataplane", ("nftproxy/dataplane/",)),
    ("metrics / status", ("nftproxy/operator/metrics.py", "nftproxy/operator/status.py", "prometheus_client/")),
    ("nftproxy operator", ("nftproxy/operator/", "nftproxy/heap.py")),
    ("kopf", ("kopf/",)),
    ("aiohttp / network", ("aiohttp/", "yarl/", "multidict/", "ssl.py", "asyncio/sslproto.py", "selector_events.py")),
    ("asyncio loop", ("asyncio/",)),
)


def categorize(stack: str) -> str:
    """The category of one collapsed stack (py-spy's raw format: frames outermost first, ';'
    between them): the category of its innermost frame that belongs to one."""
    for frame in reversed(stack.split(";")):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other"


def profile_table(collapsed: str) -> list[tuple[str, int, float]]:
    """(category, samples, share) from py-spy's collapsed output ("stack count" lines), most first."""
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[categorize(stack)] += int(n)
    total = sum(counts.values()) or 1
    return [(k, v, v / total) for k, v in counts.most_common()]


INCLUSIVE = (
    # (what, substrings of any frame of the stack): share of the samples whose stack has one
    ("kopf (its watch stream, queues, workers, and our handlers below it)", ("kopf/",)),
    ("  our kopf handlers (parse + queue)", ("nftproxy/operator/handlers.py",)),
    ("  aiohttp + SSL reads", ("aiohttp/", "ssl.py", "sslproto.py")),
    ("JSON decode (anywhere)", ("json/decoder.py", "json/__init__.py")),
    ("parse (nftproxy/model)", ("nftproxy/model/",)),
    ("the syncer's sync (nftproxy/operator/syncer.py)", ("nftproxy/operator/syncer.py",)),
    ("  compile (nftproxy/compiler)", ("nftproxy/compiler/",)),
    ("  dataplane (nftproxy/dataplane)", ("nftproxy/dataplane/",)),
    ("  netlink / kernel (nftproxy/nft)", ("nftproxy/nft/",)),
    ("epoll (the event loop waiting or polling)", ("selectors.py",)),
)


def inclusive_table(collapsed: str) -> list[tuple[str, float]]:
    """(what, share of the samples whose stack holds one of its frames), in INCLUSIVE's order."""
    counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if not (stack and n.isdigit()):
            continue
        total += int(n)
        for what, needles in INCLUSIVE:
            if any(x in stack for x in needles):
                counts[what] += int(n)
    return [(what, counts[what] / (total or 1)) for what, _ in INCLUSIVE]


def self_frames(collapsed: str, top: int = 15) -> list[tuple[str, int]]:
    """The innermost frames with the most samples."""
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[stack.split(";")[-1]] += int(n)
    return counts.most_common(top)


# ---------------------------------------------------------------------------------------------- the run


class CountingForwarder:
    """A TCP forwarder on 127.0.0.1:PORT (this namespace) to the apiserver, counting the bytes
    each way: ``down`` (apiserver -> proxy) and ``up``."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.down = 0
        self.up = 0
        self.connections = 0
        self._lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.port = port
        self._stop = False
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                out = socket.create_connection(self.target, timeout=10)
            except OSError:
                conn.close()
                continue
            out.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open += [conn, out]
            threading.Thread(target=self._pump, args=(out, conn, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, out, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
                with self._lock:
                    if down:
                        self.down += len(data)
                    else:
                        self.up += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.down, self.up

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept: until it returns the port stays bound
        self.sock.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


def kubeconfig_via(source: Path, port: int, dest: Path) -> Path:
    """``source`` (server on 127.0.0.1) with its server moved to 127.0.0.1:PORT (TLS stays end to
    end: the apiserver's certificate names 127.0.0.1)."""
    data = yaml.safe_load(source.read_text())
    for c in data.get("clusters", []):
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


class AddressWatch(_Watch):
    """When each awaited address (4 bytes) first showed in a committed nftables object of the
    namespace: a new element (nftproxy's endpoint maps; kube-proxy's service chain vmap holds
    the endpoint chain's name, whose dnat rule holds the address), a new rule or a new chain."""

    def __init__(self, netns: str) -> None:
        super().__init__(netns)
        self.wanted: dict[bytes, float] = {}  # needle -> when awaited (perf_counter)
        self.seen: dict[bytes, float] = {}
        self._thread.start()

    def expect(self, needle: bytes) -> None:
        with self._cond:
            self.wanted[needle] = time.perf_counter()

    def pending(self) -> int:
        with self._cond:
            return len(self.wanted)

    def _chunk(self, data: bytes, now: float) -> None:
        with self._cond:
            wanted = [n for n in self.wanted if n in data]
        if not wanted:
            return
        found: set[bytes] = set()
        for mtype, msg in _messages(data):
            if mtype in (_NEWSETELEM, _NEWRULE, _NEWCHAIN):
                found.update(n for n in wanted if n in msg)
        with self._cond:
            for n in found:
                if self.wanted.pop(n, None) is not None:
                    self.seen[n] = now


class Writer:
    """Sends the stream's writes at RATE per second through WORKERS keep-alive HTTPS connections
    (one Service's writes always through the same one, so in order), each PUT of the whole slice
    with its trigger time set just before it is sent."""

    def __init__(self, cp: ControlPlane, rate: float, watch: AddressWatch, workers: int = 6) -> None:
        self.cp, self.rate, self.watch = cp, rate, watch
        self.ctx = cp.ssl_context()
        self.url = urlsplit(cp.server)
        self.queues: list[queue.Queue[Write | None]] = [queue.Queue() for _ in range(workers)]
        self.sent: dict[bytes, float] = {}  # ready address -> trigger time (perf_counter)
        self.writes = 0
        self.failures = 0
        self.late = 0  # dispatches more than one interval behind
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._work, args=(q,), daemon=True) for q in self.queues]
        for t in self.threads:
            t.start()

    def _work(self, q: queue.Queue[Write | None]) -> None:
        conn: http.client.HTTPSConnection | None = None
        while (w := q.get()) is not None:
            path = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/s{w.index}-x"
            for attempt in range(3):
                if conn is None:
                    conn = http.client.HTTPSConnection(self.url.hostname or "", self.url.port, context=self.ctx)
                wall, perf = time.time(), time.perf_counter()
                w.body["metadata"]["annotations"][TRIGGER] = rfc3339(wall)
                if w.ready is not None:
                    needle = IPv4Address(w.ready).packed
                    self.watch.expect(needle)
                    with self.lock:
                        self.sent[needle] = perf
                try:
                    conn.request("PUT", path, json.dumps(w.body).encode(), {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = None
                    if attempt == 2:
                        with self.lock:
                            self.failures += 1
                    continue
                with self.lock:
                    if resp.status < 300:
                        self.writes += 1
                    else:
                        self.failures += 1
                break
        if conn is not None:
            conn.close()

    def run(self, writes: Iterator[Write], seconds: float, tick: Callable[[float], None]) -> float:
        """Dispatch for ``seconds``; ``tick(elapsed)`` is called about every 0.1 s. Returns the
        wall time from the first dispatch to the last write answered."""
        interval = 1.0 / self.rate
        start = time.perf_counter()
        next_at = start
        n = 0
        last_tick = start
        while (now := time.perf_counter()) - start < seconds:
            if now >= next_at:
                if now - next_at > interval:
                    self.late += 1
                w = next(writes)
                self.queues[w.index % len(self.queues)].put(w)
                n += 1
                next_at = start + n * interval
            if now - last_tick >= 0.1:
                tick(now - start)
                last_tick = now
            time.sleep(max(0.0, min(next_at, last_tick + 0.1) - time.perf_counter()))
        for q in self.queues:
            q.put(None)
        for t in self.threads:
            t.join()
        return time.perf_counter() - start


@dataclass
class Run:
    proxy: str
    rate: float
    seconds: float = 0.0  # churn wall time
    writes: int = 0
    failures: int = 0
    late: int = 0
    user_s: float = 0.0
    system_s: float = 0.0
    rss_start: float = 0.0
    rss_end: float = 0.0
    rss_peak: float = 0.0
    latencies: list[float] = field(default_factory=list)
    awaited: int = 0
    missed: int = 0
    syncs: float = 0.0  # IPv4 (nftproxy counts one sync in each family; kube-proxy's IPv6 proxier has no change)
    syncs_all: float = 0.0  # all families
    sync_seconds: float = 0.0  # IPv4 syncs' summed duration
    npd_sum: float = 0.0  # the proxy's own network programming histogram over the churn: sum, count
    npd_count: float = 0.0
    bytes_down: int = 0
    bytes_up: int = 0
    first_sync: float = 0.0
    overruns: int = 0
    load: tuple[float, float] = (0.0, 0.0)  # 1-min load average at the churn's start and end

    def per_min(self, x: float) -> float:
        return x / self.seconds * 60 if self.seconds else float("nan")

    @property
    def rss_change(self) -> float:
        return (self.rss_end - self.rss_start) / self.rss_start * 100 if self.rss_start else float("nan")


def metrics_in(netns: str) -> dict[str, float]:
    status, body = http_get_in(netns, *METRICS, "/metrics", timeout=10)
    if status != 200:
        raise RuntimeError(f"/metrics: {status}")
    return parse_metrics(body)


def reset_slices(cp: ControlPlane, indexes: set[int]) -> None:
    """Put the slices of ``indexes`` back as the bulk wrote them (into etcd, 100 per transaction;
    the apiserver follows through its etcd watch)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    todo = sorted(indexes)
    for a in range(0, len(todo), 100):
        ops = []
        for i in todo[a : a + 100]:
            for key, obj in stored(i, ENDPOINTS, now):
                if key.startswith("/registry/endpointslices/"):
                    put = {"key": _b64(key.encode()), "value": _b64(json.dumps(obj).encode())}
                    ops.append({"requestPut": put})
        req = urllib.request.Request(  # noqa: S310 - our etcd on loopback
            f"{cp.etcd_url}/v3/kv/txn", json.dumps({"success": ops}).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            if not json.load(resp).get("succeeded"):
                raise RuntimeError("etcd txn failed")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def touched(services: int, rate: float, seconds: float, seed: int) -> set[int]:
    """The Services a stream touches in ``seconds`` at ``rate`` (with a margin of 20 %)."""
    writes = stream(services, max(1, round(rate)), seed)
    return {next(writes).index for _ in range(int(rate * seconds * 1.2) + 10)}


def measure(
    cp: ControlPlane,
    proxy: str,
    rate: float,
    services: int,
    duration: float,
    work: Path,
    args: argparse.Namespace,
    seed: int,
    profile: Path | None = None,
    run_number: int = 0,
) -> Run:
    run = Run(proxy, rate)
    cls: type[Runner] = KubeProxyRunner if proxy == "kube-proxy" else NftproxyRunner
    wd = work / f"{proxy}-{rate:g}{'-profile' if profile else ''}"
    wd.mkdir()
    fwd = CountingForwarder(args.forward_port + run_number, ("127.0.0.1", urlsplit(cp.server).port or 443))
    shim = argparse.Namespace(kubeconfig=kubeconfig_via(cp.kubeconfig, fwd.port, wd / "via-counter.kubeconfig"))
    try:
        with bare_netns(args.netns_prefix) as netns:
            subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
            runner = cls(netns, cast(ControlPlane, shim), wd)  # type: ignore[call-arg]
            try:
                with ElementWatch(netns) as ew:
                    key = service_key(cluster_ip(services - 1), "tcp", 80)
                    ew.expect("service-ips", key)
                    t0, wall0 = time.perf_counter(), time.time()
                    env = os.environ.copy()
                    if proxy.startswith("nftproxy@"):  # e.g. nftproxy@0s: another --min-sync-period (from its env)
                        os.environ["NFTPROXY_MIN_SYNC_PERIOD"] = proxy.partition("@")[2]
                    try:
                        runner.start()
                    finally:
                        os.environ.clear()
                        os.environ.update(env)
                    run.first_sync = ew.wait("service-ips", key, args.timeout) - t0
                wait_synced(netns, *METRICS, runner.prefix, since=wall0, timeout=args.timeout, quiet=3.0)
                time.sleep(2)
                pid = runner.pid()
                spy = None
                if profile is not None:
                    spy = subprocess.Popen(
                        [os.environ.get("PY_SPY", "py-spy"), "record", "-p", str(pid), "-r", "100", "--nonblocking",
                         "-f", "raw", "-o", str(profile), "-d", str(int(duration))],
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    )  # fmt: skip
                m0 = metrics_in(netns)
                u0, s0 = cpu_user_system(pid)
                b0 = fwd.counts()
                run.rss_start = run.rss_peak = rss_mb(pid)
                run.load = (os.getloadavg()[0], 0.0)
                with AddressWatch(netns) as aw:
                    writer = Writer(cp, rate, aw)
                    next_rss = [10.0]

                    def tick(elapsed: float) -> None:
                        if elapsed >= next_rss[0]:
                            run.rss_peak = max(run.rss_peak, rss_mb(pid))
                            next_rss[0] += 10.0

                    run.seconds = writer.run(stream(services, max(1, round(rate)), seed), duration, tick)
                    u1, s1 = cpu_user_system(runner.pid())
                    b1 = fwd.counts()
                    run.rss_end = rss_mb(pid)
                    run.rss_peak = max(run.rss_peak, run.rss_end)
                    run.load = (run.load[0], os.getloadavg()[0])
                    m1 = metrics_in(netns)
                    deadline = time.monotonic() + 15  # the last writes' syncs
                    while aw.pending() and time.monotonic() < deadline:
                        time.sleep(0.2)
                    run.overruns = aw.overruns
                    sent, seen = dict(writer.sent), dict(aw.seen)
                run.writes, run.failures, run.late = writer.writes, writer.failures, writer.late
                run.user_s, run.system_s = u1 - u0, s1 - s0
                run.bytes_down, run.bytes_up = b1[0] - b0[0], b1[1] - b0[1]
                name = "kubeproxy_sync_proxy_rules_duration_seconds"
                run.syncs = metric_sum(m1, name + "_count", "IPv4") - metric_sum(m0, name + "_count", "IPv4")
                run.syncs_all = metric_sum(m1, name + "_count") - metric_sum(m0, name + "_count")
                run.sync_seconds = metric_sum(m1, name + "_sum", "IPv4") - metric_sum(m0, name + "_sum", "IPv4")
                npd = "kubeproxy_network_programming_duration_seconds"
                run.npd_sum = metric_sum(m1, npd + "_sum") - metric_sum(m0, npd + "_sum")
                run.npd_count = metric_sum(m1, npd + "_count") - metric_sum(m0, npd + "_count")
                run.awaited = len(sent)
                run.latencies = [seen[n] - t for n, t in sent.items() if n in seen]
                run.missed = run.awaited - len(run.latencies)
                if spy is not None:
                    try:
                        _, err = spy.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        spy.kill()
                        _, err = spy.communicate()
                    if spy.returncode:
                        print(f"  py-spy exit {spy.returncode}: {err.decode(errors='replace')[-500:]}", flush=True)
            finally:
                runner.stop()
    finally:
        fwd.close()
    return run


def object_sizes(cp: ControlPlane, index: int) -> dict[str, int]:
    """The bytes of one EndpointSlice as the apiserver sends it as JSON and as protobuf (what
    nftproxy and kube-proxy ask for), and the JSON without its managedFields."""
    url = urlsplit(cp.server)
    path = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/s{index}-x"
    out = {}
    for name, accept in (("json", "application/json"), ("protobuf", "application/vnd.kubernetes.protobuf")):
        conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=cp.ssl_context())
        try:
            conn.request("GET", path, headers={"Accept": accept})
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        out[name] = len(body)
        if name == "json":
            obj = json.loads(body)
            obj["metadata"].pop("managedFields", None)
            out["json without managedFields"] = len(json.dumps(obj, separators=(",", ":")))
    return out


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def report(runs: list[Run], services: int, version: str) -> None:
    print()
    print(f"kube-proxy {version} vs nftproxy, {services:,} Services x {ENDPOINTS} endpoints, EndpointSlice churn "
          "(rolling Deployments), min sync period 1 s (nftproxy@P: P); per minute of churn")  # fmt: skip
    print()
    print("| writes/s (achieved) | proxy | CPU s/min user | CPU s/min system | CPU s/min total | CPU ratio "
          "nftproxy/kube-proxy | RSS start → end (peak) | latency p50 / p99 | syncs (per min) | "
          "mean sync | MB/min from apiserver | load 1-min start / end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    by: dict[tuple[float, str], Run] = {(r.rate, r.proxy): r for r in runs}
    for r in runs:
        total = r.per_min(r.user_s + r.system_s)
        other = by.get((r.rate, "kube-proxy"))
        ratio = (
            f"{total / other.per_min(other.user_s + other.system_s):.3f}x"
            if r.proxy.startswith("nftproxy") and other and other.user_s + other.system_s
            else ""
        )
        p50, p99 = pct(r.latencies, 0.5), pct(r.latencies, 0.99)
        print(
            f"| {r.rate:g} ({r.writes / r.seconds:.1f}) | {r.proxy} | {r.per_min(r.user_s):.2f} | "
            f"{r.per_min(r.system_s):.2f} | {total:.2f} | {ratio} | {r.rss_start:.0f} → {r.rss_end:.0f} MB "
            f"({r.rss_change:+.1f} %, peak {r.rss_peak:.0f}) | {_f(p50 and p50 * 1000, '.0f')} / "
            f"{_f(p99 and p99 * 1000, '.0f')} ms | {r.syncs:.0f} ({r.per_min(r.syncs):.0f}) | "
            f"{_f(r.sync_seconds / r.syncs * 1000 if r.syncs else None, '.0f')} ms | "
            f"{r.per_min(r.bytes_down) / 1e6:.2f} | {r.load[0]:.2f} / {r.load[1]:.2f} |"
        )
    print()
    for r in runs:
        own = f"{r.npd_sum / r.npd_count * 1000:.0f} ms mean of {r.npd_count:.0f}" if r.npd_count else "none"
        print(
            f"  {r.proxy} at {r.rate:g}/s: {r.writes} writes in {r.seconds:.1f} s ({r.failures} failed, "
            f"{r.late} dispatched late), first sync {r.first_sync:.2f} s; latency samples {len(r.latencies)} of "
            f"{r.awaited} ({r.missed} never seen); syncs IPv4 {r.syncs:.0f}, all families {r.syncs_all:.0f}; "
            f"its own network-programming histogram: {own}; "
            f"bytes from / to the apiserver {r.bytes_down:,} / {r.bytes_up:,}"
            + (f"; netlink overruns {r.overruns}" if r.overruns else "")
        )


def main() -> int:
    p = argparse.ArgumentParser(prog="bench.churn_vs_kubeproxy", description=__doc__)
    p.add_argument("--services", type=int, default=10_000)
    p.add_argument("--rates", default="20,100")
    p.add_argument("--duration", type=float, default=300.0)
    p.add_argument(
        "--proxies", default="kube-proxy,nftproxy", help="also nftproxy@PERIOD: nftproxy with --min-sync-period PERIOD"
    )
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--profile-seconds", type=float, default=0.0)
    p.add_argument("--netns-prefix", default="chb")
    p.add_argument("--forward-port", type=int, default=46100)
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--keep", action="store_true", help="keep the work directory (proxy logs)")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    proxies = args.proxies.split(",")
    version = kube_proxy_version()
    compileall.compile_dir(Path(nftproxy.__file__).parent, quiet=1)  # as installed (bench.vs_kubeproxy)
    work = Path(tempfile.mkdtemp(prefix="chb-"))
    print(f"kube-proxy {version} vs nftproxy under EndpointSlice churn: {args.services:,} Services x {ENDPOINTS}, "
          f"rates {args.rates}/s, {args.duration:g} s each; load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    runs: list[Run] = []
    try:
        with ControlPlane() as cp:
            prepare(cp, NODE)
            t0 = time.perf_counter()
            import_many(cp, 0, args.services, ENDPOINTS)
            print(f"  (imported {args.services} Services + slices in {time.perf_counter() - t0:.0f} s)", flush=True)
            dirty: set[int] = set()
            plan: list[tuple[float, str, Path | None]] = [(rate, proxy, None) for rate in rates for proxy in proxies]
            if args.profile_seconds:
                plan.append((max(rates), "nftproxy", work / "nftproxy.pyspy"))
            for k, (rate, proxy, prof) in enumerate(plan):
                if dirty:
                    reset_slices(cp, dirty)
                    time.sleep(2)
                seconds = args.profile_seconds if prof else args.duration
                dirty = touched(args.services, rate, seconds, args.seed)
                r = measure(cp, proxy, rate, args.services, seconds, work, args, args.seed, prof, k)
                if prof is not None:
                    print_profile(prof, r)
                    continue
                runs.append(r)
                if len(runs) == 1:
                    last = next(itertools.islice(stream(args.services, max(1, round(rate)), args.seed), 30, None))
                    sizes = object_sizes(cp, last.index)
                    print(f"  one churned EndpointSlice (s{last.index}-x) as the apiserver sends it: "
                          + ", ".join(f"{k} {v:,} B" for k, v in sizes.items()), flush=True)  # fmt: skip
                print(f"  {proxy} at {rate:g}/s: CPU user {r.per_min(r.user_s):.2f} + system "
                      f"{r.per_min(r.system_s):.2f} s/min, RSS {r.rss_start:.0f} -> {r.rss_end:.0f} MB, p50/p99 "
                      f"{_f(pct(r.latencies, .5))}/{_f(pct(r.latencies, .99))} s, {r.syncs:.0f} syncs, "
                      f"{r.per_min(r.bytes_down) / 1e6:.2f} MB/min in; load {r.load[0]:.2f}/{r.load[1]:.2f}",
                      flush=True)  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"  (work directory kept: {work})")
    report(runs, args.services, version)
    for r in runs:
        labels = {"services": args.services, "rate": r.rate, "proxy": r.proxy, "kube_proxy": version}
        figure("CPU user per minute", r.per_min(r.user_s), "s", **labels)
        figure("CPU system per minute", r.per_min(r.system_s), "s", **labels)
        figure("RSS start", r.rss_start, "MB", **labels)
        figure("RSS end", r.rss_end, "MB", **labels)
        figure("RSS peak", r.rss_peak, "MB", **labels)
        figure("latency p50", pct(r.latencies, 0.5), "s", **labels)
        figure("latency p99", pct(r.latencies, 0.99), "s", **labels)
        figure("syncs", r.syncs, "", **labels)
        figure("bytes from apiserver per minute", r.per_min(r.bytes_down), "B", **labels)
        figure("writes per second achieved", r.writes / r.seconds, "1/s", **labels)
    return 0


def print_profile(path: Path, r: Run) -> None:
    try:
        collapsed = path.read_text()
    except FileNotFoundError:
        print("  (no profile written)")
        return
    total = r.per_min(r.user_s + r.system_s)
    print(f"\nWhere nftproxy's CPU goes at {r.rate:g} writes/s (py-spy, {r.seconds:.0f} s, {total:.2f} CPU s/min "
          "while profiled; share of the samples, by innermost known frame):")  # fmt: skip
    for name, n, share in profile_table(collapsed):
        print(f"  {name:<20} {share * 100:5.1f} %  ({n} samples)")
    print("  inclusive (a sample counts for each of these its stack passes through):")
    for what, share in inclusive_table(collapsed):
        print(f"    {share * 100:5.1f} %  {what}")
    print("  top frames:")
    for frame, n in self_frames(collapsed):
        print(f"    {n:6d}  {frame[:150]}")


if __name__ == "__main__":
    sys.exit(main())
