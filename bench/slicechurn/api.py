"""The apiserver side: the stream's writes at a rate, the slices put back between runs (etcd), an
EndpointSlice's size on the wire."""

from __future__ import annotations

import base64
import http.client
import json
import queue
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address
from typing import Protocol
from urllib.parse import urlsplit

from bench.apiserver import NS, stored
from bench.slicechurn.stream import ENDPOINTS, TRIGGER, Write, rfc3339
from testkit.k8s.controlplane import ControlPlane


class Awaits(Protocol):
    """What waits for the addresses the writes make ready (churn_vs_kubeproxy's AddressWatch)."""

    def expect(self, needle: bytes) -> None: ...


class Writer:
    """Sends the stream's writes at RATE per second through WORKERS keep-alive HTTPS connections
    (one Service's writes always through the same one, so in order), each PUT of the whole slice
    with its trigger time set just before it is sent; ``watch`` (if any) is told each address a
    write makes ready, and ``sent`` holds when each was sent."""

    def __init__(self, cp: ControlPlane, rate: float, watch: Awaits | None = None, workers: int = 6) -> None:
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
                if w.ready is not None and self.watch is not None:
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
