"""Where the operator's start-up time and memory go, without an apiserver: the initial list's
pages (JSON, as the API sends them) decoded, parsed and queued by the Syncer as in
``handlers.relist``, then its first sync into a fresh network namespace's kernel.

Run: ``.venv/bin/python -m bench.startup [--services 10000,50000]`` (one process per size).
Each phase's seconds (wall, and the CPU seconds of every thread of the process: on a shared
machine the wall time includes waiting for a core) and the process RSS after it (VmRSS; VmHWM:
the peak so far).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import uuid

from bench.figures import figure
from bench.listed import endpoint_slice, service
from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.conntrack import KernelConntrack
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.settings import Settings
from nftproxy.operator.syncer import Syncer
from testkit.process import peak_rss_mb, rss_mb

PAGE = 500


def rss() -> tuple[float, float]:
    """This process's RSS and peak RSS, MiB."""
    return rss_mb(os.getpid()), peak_rss_mb(os.getpid())


def pages(make: object, n: int) -> list[bytes]:
    """The API's pages as bytes (what the client receives), made before the clock starts."""
    assert callable(make)
    return [json.dumps({"items": [make(i) for i in range(a, min(n, a + PAGE))]}).encode() for a in range(0, n, PAGE)]


def one(n: int, netns: str) -> None:
    svc_pages = pages(service, n)
    slice_pages = pages(lambda i: endpoint_slice(i, 10), n)
    gc.collect()
    base = rss()[0]
    settings = Settings(ProxyConfig(node_name="node-1"), None, 0.0, 30.0, None, None, netns, 5.0, "info")
    backend, ct = KernelBackend(netns), KernelConntrack(netns)
    syncer = Syncer(Dataplane(backend, settings.proxy, ct), settings, Metrics())
    marks: list[tuple[str, float, float, float, float]] = []
    cpu = [time.process_time()]

    def mark(what: str, t0: float) -> float:
        now = time.perf_counter()
        c = time.process_time()
        marks.append((what, now - t0, c - cpu[0], *rss()))
        cpu[0] = c
        return now

    async def go() -> None:
        t = time.perf_counter()
        gc.disable()  # as handlers.initial_load
        decoded = 0.0
        for kind, raw_pages in (("svc", svc_pages), ("slice", slice_pages)):
            changed = syncer.changes.service_changed if kind == "svc" else syncer.changes.slice_changed
            for raw in raw_pages:
                a = time.perf_counter()
                items = json.loads(raw)["items"]
                decoded += time.perf_counter() - a
                for obj in items:
                    meta = obj["metadata"]
                    changed(f"{meta['namespace']}/{meta['name']}", obj)
        gc.freeze()
        gc.enable()
        marks.append(("  of which JSON decoding", decoded, float("nan"), *rss()))
        t = mark("list pages decoded, parsed, queued", t)
        syncer.changes.mark_loaded()
        await syncer.sync_once()
        mark("first sync (apply queued, compile, commit)", t)

    asyncio.run(go())
    backend.close()
    ct.close()
    print(f"{n} Services x 10 endpoints (RSS before: {base:.0f} MB, the raw pages included)")
    for what, seconds, cpu_s, now, peak in marks:
        for field, value, unit in (
            ("seconds", seconds, "s"),
            ("cpu", cpu_s, "s"),
            ("rss", now, "MB"),
            ("peak rss", peak, "MB"),
        ):
            figure(field, value, unit, step=what, services=n)
        print(f"  {what:<44} {seconds:6.2f} s (CPU {cpu_s:5.2f} s)   RSS {now:5.0f} MB (peak {peak:5.0f} MB)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--services", default="10000,50000")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--netns-prefix", default="ntbst", help="name the namespace PREFIX-<random> (default ntbst)")
    args = p.parse_args()
    if args.one:
        netns = f"{args.netns_prefix}-{uuid.uuid4().hex[:6]}"
        subprocess.run(["ip", "netns", "add", netns], check=True)
        try:
            one(args.one, netns)
        finally:
            subprocess.run(["ip", "netns", "del", netns], check=False)
        return 0
    for n in (int(x) for x in args.services.split(",")):
        argv = [sys.executable, "-m", "bench.startup", "--one", str(n), "--netns-prefix", args.netns_prefix]
        subprocess.run(argv, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
