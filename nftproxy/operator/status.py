"""ProxyStatus and Events: what this node reports, rate-limited (never one write per event)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from nftproxy import __version__
from nftproxy.compiler.claims import PORT_CONFLICT
from nftproxy.model.types import Skipped
from nftproxy.operator import kube
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.status")

MAX_LISTED = 50

# What changes with every sync while nothing else does, a heartbeat: when only these changed, the
# write waits until REPORT_PERIOD after the last one, as the kubelet reports a Node status that
# has not changed (its nodeStatusReportFrequency); anything else goes out within --status-period.
# Under churn that is one write a minute instead of one each --status-period (each a write of a
# custom resource that the apiserver pays for).
HEARTBEAT = frozenset({"lastSyncTime", "lastSyncDuration", "lastSyncKind", "syncs", "rulesetChecksum"})
REPORT_PERIOD = 60.0


def held_until(written: dict[str, Any] | None, status: dict[str, Any], last_report: float) -> float | None:
    """When ``status`` is to be written if nothing else changes: None, now (something other than
    the heartbeat changed, a heartbeat field got its first value, or nothing was written yet),
    else REPORT_PERIOD after ``last_report``."""
    if written is None or status == written or any(status.get(k) and not written.get(k) for k in HEARTBEAT):
        return None
    if any(status.get(k) != written.get(k) for k in status.keys() | written.keys() if k not in HEARTBEAT):
        return None
    return last_report + REPORT_PERIOD


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms" if seconds < 10 else f"{seconds:.1f}s"


def render_status(syncer: Syncer) -> dict[str, Any]:
    s = syncer.status
    health = syncer.proxy_health()
    in_sync = syncer.in_sync()
    return {
        "services": s.services,
        "endpoints": s.endpoints,
        "lastSyncTime": s.last_success_time.strftime("%Y-%m-%dT%H:%M:%SZ") if s.last_success_time else None,
        "lastSyncDuration": _duration(s.last_duration),
        "lastSyncKind": s.last_kind or None,
        "rulesetChecksum": s.checksum or None,
        "syncs": s.syncs,
        "failures": s.failures,
        "lastError": s.last_error or None,
        "skippedCount": len(s.skipped),
        "skipped": [
            {"kind": x.kind, "namespace": x.namespace, "name": x.name, "reason": x.reason}
            for x in s.skipped[:MAX_LISTED]
        ],
        "version": __version__,
        "conditions": [
            {
                "type": "InSync",
                "status": "True" if in_sync else "False",
                "reason": "Synced" if in_sync else ("SyncFailed" if s.last_error else "Pending"),
                "message": s.last_error
                or (health.message() if s.syncs or not health.healthy else "no successful sync yet"),
            },
            *s.conditions,
        ],
    }


class StatusWriter:
    def __init__(self, api: kube.Client, syncer: Syncer, node: str, period: float) -> None:
        self.api = api
        self.syncer = syncer
        self.node = node
        self.period = period
        self.node_uid: str | None = None
        self.reported: set[str] = set()  # Events already posted (one per object and reason)
        self.last_write = 0.0
        self.last_written: dict[str, Any] | None = None
        self.written_with: str | None = None  # the Node's uid the last write had as its owner
        self.last_report = 0.0  # when the status was last written (time.monotonic)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        held: float | None = None  # a heartbeat held back (held_until): written then unless sooner
        while True:
            with contextlib.suppress(TimeoutError):
                timeout = None if held is None else max(0.0, held - time.monotonic())
                await asyncio.wait_for(self.syncer.changed.wait(), timeout)
            wait = self.last_write + self.period - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # rate limit: changes meanwhile fold into one write
            self.syncer.changed.clear()
            status = render_status(self.syncer)
            written = self.last_written is not None
            owner_due = written and self.written_with != self.node_uid  # the Node known since: its owner now
            held = None if owner_due else held_until(self.last_written, status, self.last_report)
            if held is not None and held <= time.monotonic():
                held = None
            fresh = [x for x in self.syncer.status.skipped if str(x) not in self.reported]
            try:
                if held is None and (status != self.last_written or owner_due):
                    uid, exists = self.node_uid, written and not owner_due
                    await loop.run_in_executor(None, kube.write_proxy_status, self.api, self.node, uid, status, exists)
                    self.last_written, self.written_with = status, uid
                    self.last_report = time.monotonic()
                for x in fresh:
                    await loop.run_in_executor(None, self._event, x)
                    self.reported.add(str(x))
            except Exception as e:  # API unavailable: keep the rules, try again later
                log.warning("could not write ProxyStatus/Events: %s", str(e).splitlines()[0] if str(e) else e)
                self.syncer.changed.set()
            self.last_write = time.monotonic()

    def _event(self, x: Skipped) -> None:
        if x.event == PORT_CONFLICT:  # one frontend left out, the rest of the Service programmed
            message = f"nftproxy on {self.node}: {x.reason}"
        else:
            message = f"nftproxy on {self.node} skipped this {x.kind}: {x.reason}"
        kube.post_event(self.api, self.node, x.kind, x.namespace, x.name, x.event, message)
