"""Churn, crashes and outages against a real control plane, with real connections and the checker.

One node namespace (netlab) with three echo pods and a client pod; `nftproxy run --netns` for it
(testkit.k8s.cluster); N churned Services (endpoints at made-up addresses: the rules are what is
measured) and a few stable Services backed by the real pods. While a steady stream of API writes
runs (endpoints scaled, Services added and deleted, policies flipped), the client pod opens fresh
TCP connections to the stable Services; optionally `nftproxy run` is SIGKILLed and restarted every
few seconds, and the apiserver or etcd is stopped for a while. At the end the convergence checker
(nftproxy.diagnose.verify) compares the kernel's table with the API: every difference is a lost update.

Figures: connections attempted/failed, writes done/failed, event -> kernel latency of endpoint
writes (seen by `nft monitor`), sync failures (the proxy's log), RSS of the proxy, time back to
healthy after each restart, what /healthz said during each outage and how long after it a write
took to reach the kernel, and the checker's final differences.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from ipaddress import IPv4Address, ip_network
from pathlib import Path
from typing import Any, TypeVar

from nftproxy.cli.verify import verify_once
from nftproxy.compiler import ProxyConfig
from nftproxy.diagnose.verify import Report
from nftproxy.nft import netns as netns_mod
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator import kube
from testkit import process
from testkit.k8s import objects
from testkit.k8s.cluster import LocalCluster
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import PY, NetLab, Node, Pod

T = TypeVar("T")
NS = "churn"
PROBER = Path(__file__).resolve().parents[1] / "lab" / "prober.py"
CHURN_BASE = int(IPv4Address("10.96.64.0"))
STABLE_BASE = int(IPv4Address("10.96.250.0"))
MARKER_IP = "10.96.251.1"
FAKE_EP_BASE = int(IPv4Address("10.128.0.0"))
UNIQUE_EP_BASE = int(IPv4Address("10.160.0.0"))  # one fresh address per endpoint write: its latency key


@dataclass(frozen=True)
class Plan:
    services: int = 300
    endpoints: int = 10  # per churned Service at most
    duration: float = 30.0  # seconds of churn
    rate: float = 50.0  # API writes per second
    stable: int = 3  # Services with real pods behind them, probed all along
    crash_every: float = 0.0  # SIGKILL and restart `nftproxy run` this often (0: never)
    outages: tuple[tuple[str, float, float], ...] = ()  # ("apiserver"|"etcd", at second, for seconds)
    min_sync_period: str = "1s"
    sync_period: str = "30s"
    probe_rate: float = 20.0  # connections per second to the stable Services
    converge_timeout: float = 180.0
    seed: int = 1


@dataclass
class Outage:
    what: str
    at: float
    seconds: float
    healthz: list[int] = field(default_factory=list)  # /healthz status codes seen during it (0: no answer)
    after_seconds: float | None = None  # restart -> a write made right then is in the kernel
    in_sync_after: str = ""  # ProxyStatus InSync condition once the API is back


@dataclass
class Result:
    plan: Plan
    first_sync_seconds: float = 0.0
    attempts: int = 0
    failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    writes: int = 0
    write_failures: int = 0
    writes_skipped: int = 0  # not sent: every writer busy (an outage holding requests)
    churn_seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    sync_failures: int = 0
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds into churn, MB)
    restarts: list[float] = field(default_factory=list)  # SIGKILL -> /healthz 200 again, seconds
    outages: list[Outage] = field(default_factory=list)
    converge_seconds: float | None = None
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rss_growth(self) -> float:
        return (self.rss_end_mb - self.rss_start_mb) / self.rss_start_mb if self.rss_start_mb else 0.0

    def second_half_growth(self) -> float | None:
        """RSS growth from the middle of the churn to its end (warm-up excluded), in percent."""
        if len(self.rss_samples) < 4:
            return None
        mid = self.rss_samples[len(self.rss_samples) // 2][1]
        return round((self.rss_samples[-1][1] - mid) / mid * 100, 1) if mid else None

    def pct(self, p: float) -> float | None:
        if not self.latencies:
            return None
        s = sorted(self.latencies)
        return s[min(len(s) - 1, round(p * (len(s) - 1)))]

    def summary(self) -> dict[str, Any]:
        p50, p99 = self.pct(0.5), self.pct(0.99)
        return {
            "services": self.plan.services,
            "duration_s": self.plan.duration,
            "rate_per_s": self.plan.rate,
            "first_sync_s": round(self.first_sync_seconds, 2),
            "connections": self.attempts,
            "failed_connections": self.failed,
            "writes": self.writes,
            "write_failures": self.write_failures,
            "writes_skipped": self.writes_skipped,
            "churn_s": round(self.churn_seconds, 1),
            "achieved_rate_per_s": round(self.writes / self.churn_seconds, 1) if self.churn_seconds else 0,
            "latency_samples": len(self.latencies),
            "event_to_kernel_p50_ms": None if p50 is None else round(p50 * 1000, 1),
            "event_to_kernel_p99_ms": None if p99 is None else round(p99 * 1000, 1),
            "sync_failures": self.sync_failures,
            "rss_start_mb": round(self.rss_start_mb, 1),
            "rss_end_mb": round(self.rss_end_mb, 1),
            "rss_growth_pct": round(self.rss_growth * 100, 1),
            "rss_mb_every_30s": [round(mb) for _, mb in self.rss_samples[::3]],
            "rss_growth_second_half_pct": self.second_half_growth(),
            "restarts_to_healthy_s": [round(x, 2) for x in self.restarts],
            "outages": [
                {
                    "what": o.what,
                    "seconds": o.seconds,
                    "healthz_during": sorted(set(o.healthz)),
                    "write_to_kernel_after_s": None if o.after_seconds is None else round(o.after_seconds, 2),
                    "in_sync_after": o.in_sync_after,
                }
                for o in self.outages
            ],
            "converge_s": None if self.converge_seconds is None else round(self.converge_seconds, 2),
            "lost_updates": len(self.differences),
            "differences": self.differences[:20],
        }


class InNetns:
    """One thread inside a network namespace, for HTTP to what the proxy serves there."""

    def __init__(self, netns: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="in-netns")
        self._pool.submit(netns_mod.enter, netns).result()

    def call(self, fn: Callable[[], T]) -> T:
        return self._pool.submit(fn).result()

    def healthz(self, url: str) -> int:
        def get() -> int:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - our own lab address
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return int(e.code)
            except OSError:
                return 0

        return self.call(get)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class Monitor:
    """`nft monitor elements` in the node: when each unique endpoint address first reached the kernel."""

    def __init__(self, netns: str) -> None:
        self.seen: dict[str, float] = {}
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, "nft", "monitor", "elements"],
            stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        time.sleep(0.3)

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            if not line.startswith("add element"):
                continue
            now = time.monotonic()
            for part in line.split(": 10.")[1:]:  # endpoint values: "10.160.x.y . 8080"
                addr = "10." + part.split(" ", 1)[0]
                if addr.startswith("10.16") and addr not in self.seen:
                    self.seen[addr] = now

    def close(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def service(name: str, ip: str, **spec: Any) -> dict[str, Any]:
    return objects.service(name, [ip], [objects.port(80, "http")], namespace=NS, **spec)


def endpoint_slice(name: str, addresses: list[str], node: str | None = None) -> dict[str, Any]:
    eps = [objects.endpoint(a, node=node or f"other-{j % 7}") for j, a in enumerate(addresses)]
    return objects.endpoint_slice(f"{name}-x", name, eps, [objects.port(8080, "http")], namespace=NS)


def fake_endpoints(i: int, n: int) -> list[str]:
    return [str(IPv4Address(FAKE_EP_BASE + (i * 16 + j) % (1 << 21))) for j in range(n)]


class Churn:
    """The run; ``run()`` returns its Result. Everything it starts is stopped in ``close()``."""

    def __init__(self, cp: ControlPlane, plan: Plan, workdir: Path) -> None:
        self.cp = cp
        self.plan = plan
        self.workdir = workdir
        self.result = Result(plan)
        self.rng = random.Random(plan.seed)
        self.api = kube.connect(str(cp.kubeconfig))
        self.lab = NetLab("vf")
        self.cl = LocalCluster(cp, self.lab, workdir)
        self.node: Node = self.cl.add_node("churn-node", 1)
        self.pods: list[Pod] = [self.lab.add_pod(self.node, f"p{i}", tcp=(8080,), udp=()) for i in range(3)]
        self.client: Pod = self.lab.add_pod(self.node, "cli", tcp=(8081,), udp=())
        self.netns = InNetns(self.node.netns)
        self.kernel = KernelBackend(self.node.netns)
        self.healthz_url = f"http://{self.node.ipv4}:10256/healthz"
        self.live: list[int] = []  # churned Service indexes that exist
        self.next_index = plan.services
        self.generation = 0
        self.lock = threading.Lock()
        self.written: dict[str, float] = {}  # unique endpoint address -> write time
        self.monitor: Monitor | None = None
        self.prober: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        self.config = ProxyConfig(
            node_name=self.node.name,
            cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
        )

    # -- API --------------------------------------------------------------------------------
    SERVICES = f"/api/v1/namespaces/{NS}/services"
    SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"

    def _create(self, i: int) -> None:
        name = f"s{i}"
        self.api.request("POST", self.SERVICES, body=service(name, str(IPv4Address(CHURN_BASE + i))), timeout=10)
        n = 1 + (i % self.plan.endpoints)
        self.api.request("POST", self.SLICES, body=endpoint_slice(name, fake_endpoints(i, n)), timeout=10)

    def populate(self) -> None:
        self.cl.namespace(NS)
        for k in range(self.plan.stable):
            name = f"stable-{k}"
            self.cl.apply(
                service(name, str(IPv4Address(STABLE_BASE + 1 + k))),
                endpoint_slice(name, [p.ipv4 for p in self.pods], node=self.node.name),
            )
        self.cl.apply(service("marker", MARKER_IP), endpoint_slice("marker", fake_endpoints(0, 1)))
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(self._create, range(self.plan.services)))
        self.live = list(range(self.plan.services))

    # -- the proxy --------------------------------------------------------------------------
    def start_proxy(self) -> None:
        flags = ("--min-sync-period", self.plan.min_sync_period, "--sync-period", self.plan.sync_period,
                 "--status-period", "1s", "--log-level", "info")  # fmt: skip
        self.cl.start_proxy(self.node, *flags)

    def wait_healthy(self, timeout: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.netns.healthz(self.healthz_url) == 200:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise AssertionError(f"nftproxy not healthy after {timeout}s:\n{self.cl.proxy_log(self.node)[-3000:]}")

    def rss_mb(self) -> float:
        return process.rss_mb(self.cl.proxies[self.node.name].pid)

    def check(self, attempts: int = 30) -> Report:
        """The checker; API errors (a pooled connection the restarted apiserver dropped) are retried."""
        for _ in range(attempts - 1):
            try:
                return verify_once(self.api, self.kernel, self.config)
            except Exception as e:
                self.result.notes.append(f"checker retried: {str(e).splitlines()[0][:120]}")
                time.sleep(1)
        return verify_once(self.api, self.kernel, self.config)

    # -- churn ------------------------------------------------------------------------------
    def _unique_address(self) -> str:
        with self.lock:
            self.generation += 1
            return str(IPv4Address(UNIQUE_EP_BASE + self.generation))

    def _op(self) -> Callable[[], None]:
        """One random API write (chosen now, run by a writer thread)."""
        roll = self.rng.random()
        with self.lock:
            if not self.live:
                roll = 0.95
            i = self.rng.choice(self.live) if self.live else 0
            if roll >= 0.85:
                i = self.next_index
                self.next_index += 1
                self.live.append(i)
            elif roll >= 0.7:
                self.live.remove(i)
        name = f"s{i}"
        if roll < 0.5:  # endpoints scaled: n - 1 of its own + one fresh address (the latency key)
            n = self.rng.randint(1, self.plan.endpoints)
            addrs = [*fake_endpoints(i, n - 1), self._unique_address()]

            def scale() -> None:
                body = endpoint_slice(name, addrs)
                t = time.monotonic()
                self.api.request("PUT", f"{self.SLICES}/{name}-x", body=body, timeout=5)
                self.written[addrs[-1]] = t

            return scale
        if roll < 0.7:  # a policy flipped
            field_, values = self.rng.choice(
                [("internalTrafficPolicy", ("Local", "Cluster")), ("sessionAffinity", ("ClientIP", "None"))]
            )
            value = self.rng.choice(values)

            def flip() -> None:
                self.api.request("PATCH", f"{self.SERVICES}/{name}", body={"spec": {field_: value}}, timeout=5)

            return flip
        if roll < 0.85:

            def delete() -> None:
                self.api.request("DELETE", f"{self.SERVICES}/{name}", timeout=5)
                self.api.request("DELETE", f"{self.SLICES}/{name}-x", timeout=5)

            return delete
        return lambda: self._create(i)

    def churn(self, until: Callable[[], bool] = lambda: True) -> None:
        """Writes at the plan's rate for its duration, and on while ``until()`` is False (faults
        still running: an outage always happens during churn)."""
        plan, res = self.plan, self.result
        writers = ThreadPoolExecutor(6, thread_name_prefix="writer")
        busy: set[Future[None]] = set()
        interval = 1.0 / plan.rate
        start = time.monotonic()
        next_at = start
        next_sample = start
        try:
            while time.monotonic() - start < plan.duration or not until():
                now = time.monotonic()
                if now >= next_sample and self.node.name in self.cl.proxies:
                    with contextlib.suppress(OSError):  # the process may be restarting
                        res.rss_samples.append((now - start, self.rss_mb()))
                    next_sample += 10.0
                busy = {f for f in busy if not f.done()}
                if len(busy) >= 6:
                    res.writes_skipped += 1
                else:
                    op = self._op()

                    def run(op: Callable[[], None] = op) -> None:
                        try:
                            op()
                            res.writes += 1
                        except Exception:
                            res.write_failures += 1

                    busy.add(writers.submit(run))
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            writers.shutdown(wait=True)
            res.churn_seconds = time.monotonic() - start

    # -- faults -----------------------------------------------------------------------------
    def crasher(self) -> None:
        every = self.plan.crash_every
        while not self.stopping.wait(every):
            self.cl.stop_proxy(self.node, signal.SIGKILL)
            t0 = time.monotonic()
            self.start_proxy()
            try:
                self.wait_healthy(120)
            except AssertionError as e:
                self.result.notes.append(str(e).splitlines()[0])
                continue
            self.result.restarts.append(time.monotonic() - t0)

    def run_outages(self, churn_start: float) -> None:
        """The planned outages one after the other (each at its time, or when the previous ends)."""
        for o in self.result.outages:
            if self.stopping.wait(max(0.0, churn_start + o.at - time.monotonic())):
                return
            self.outage(o)

    def outage(self, o: Outage) -> None:
        stop, start = (
            (self.cp.stop_apiserver, self.cp.start_apiserver)
            if o.what == "apiserver"
            else (self.cp.stop_etcd, self.cp.start_etcd)
        )
        stop()
        until = time.monotonic() + o.seconds
        while time.monotonic() < until:
            o.healthz.append(self.netns.healthz(self.healthz_url))
            time.sleep(1.0)
        start()
        # how long until a write made right now is in the kernel
        addr = self._unique_address()
        t0 = time.monotonic()
        deadline = t0 + 120
        while time.monotonic() < deadline:
            try:
                self.api.request("PUT", f"{self.SLICES}/marker-x", body=endpoint_slice("marker", [addr]), timeout=5)
                break
            except Exception:
                time.sleep(0.5)
        while time.monotonic() < deadline and self.monitor is not None and addr not in self.monitor.seen:
            time.sleep(0.05)
        if self.monitor is not None and addr in self.monitor.seen:
            o.after_seconds = self.monitor.seen[addr] - t0
        time.sleep(3)
        st = self.cl.proxy_status(self.node).get("status", {})
        cond = {c["type"]: c for c in st.get("conditions", [])}.get("InSync", {})
        o.in_sync_after = f"{cond.get('status')} ({cond.get('reason')})"

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> Result:
        plan, res = self.plan, self.result
        self.populate()
        t0 = time.monotonic()
        self.start_proxy()
        self.wait_healthy(600)
        res.first_sync_seconds = time.monotonic() - t0
        deadline = time.monotonic() + 300
        while self.check().differences and time.monotonic() < deadline:  # the first sync is complete
            time.sleep(1)
        self.monitor = Monitor(self.node.netns)
        targets = [f"{IPv4Address(STABLE_BASE + 1 + k)}:80" for k in range(plan.stable)]
        self.prober = self.lab.popen(
            self.client, *PY, str(PROBER), "--rate", str(plan.probe_rate), *targets, stdout=subprocess.PIPE
        )
        assert self.prober.stdout is not None
        if self.prober.stdout.readline().strip() != b"READY":
            raise AssertionError("prober did not start")
        time.sleep(2)
        res.rss_start_mb = self.rss_mb()
        churn_start = time.monotonic()
        crasher = threading.Thread(target=self.crasher, daemon=True) if plan.crash_every else None
        res.outages = [Outage(what, at, seconds) for what, at, seconds in plan.outages]
        outages_done = threading.Event()
        if not res.outages:
            outages_done.set()
        errors: list[BaseException] = []

        def churn() -> None:
            try:
                self.churn(until=outages_done.is_set)
            except BaseException as e:
                errors.append(e)

        writer = threading.Thread(target=churn, name="churn", daemon=True)
        writer.start()
        if crasher is not None:
            crasher.start()
        try:
            # In this thread: the control plane's children get SIGTERM when the thread that
            # started them ends (PR_SET_PDEATHSIG), so a restarted apiserver/etcd must not be
            # started from a short-lived thread.
            self.run_outages(churn_start)
        finally:
            outages_done.set()
            writer.join()
            self.stopping.set()
            if crasher is not None:
                crasher.join(timeout=300)
        if errors:
            raise errors[0]
        res.rss_end_mb = self.rss_mb()
        t_end = time.monotonic()
        report = self.check()
        while report.differences and time.monotonic() - t_end < plan.converge_timeout:
            time.sleep(1)
            report = self.check()
        res.converge_seconds = time.monotonic() - t_end if not report.differences else None
        res.differences = [str(d) for d in report.differences]
        time.sleep(2)
        self._stop_prober()
        seen = self.monitor.seen
        res.latencies = [seen[a] - t for a, t in self.written.items() if a in seen]
        log = self.cl.proxy_log(self.node)
        res.sync_failures = log.count("sync failed")
        if "Traceback" in log:
            res.notes.append("the proxy's log has a Traceback")
        return res

    def _stop_prober(self) -> None:
        if self.prober is None:
            return
        self.prober.send_signal(signal.SIGTERM)
        out, _ = self.prober.communicate(timeout=30)
        self.prober = None
        data = json.loads(out.decode().strip().splitlines()[-1])
        self.result.attempts = sum(data["attempts"].values())
        self.result.failed = sum(data["failed"].values())
        self.result.failures = data["failures"]

    def close(self) -> None:
        self.stopping.set()
        with contextlib.suppress(Exception):
            self._stop_prober()
        if self.monitor is not None:
            self.monitor.close()
        self.cl.close()
        self.kernel.close()
        self.netns.close()
        self.lab.close()


def run(cp: ControlPlane, plan: Plan, workdir: Path) -> Result:
    churn = Churn(cp, plan, workdir)
    try:
        return churn.run()
    finally:
        churn.close()
