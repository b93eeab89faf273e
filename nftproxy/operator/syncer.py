"""The syncer: the change tracker's pending changes in, one nftables transaction per sync out.

kopf's handlers (and our lists) hand each object to the change tracker (``changes.py``) in one
call; it wakes the loop. The loop waits until the initial lists are loaded, then syncs when the
schedule (``schedule.py``) says: at most once per ``min_sync_period``, a check of the kernel's table
every ``sync_period`` (and a comparison of every element hourly, repairing any drift), failures
retried with exponential backoff. Compile and commit run in a worker thread; the event loop never
waits for the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nftproxy import heap
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.dataplane.sync import Dataplane, SyncResult
from nftproxy.model.types import Skipped
from nftproxy.operator.changes import ChangeTracker, Trigger
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.proxy_health import Health, ProxyHealth
from nftproxy.operator.schedule import Schedule, Sync
from nftproxy.operator.settings import Settings

log = logging.getLogger("nftproxy.syncer")

# Services, endpoints, skipped, health checks (port -> (Service, {IP version: local endpoints})),
# Service ports with no local endpoint under a Local policy ((policy, IP version) -> count)
Stats = tuple[int, int, list[Skipped], dict[int, tuple[str, dict[int, int]]], dict[tuple[str, int], int]]


@dataclass
class Status:
    """What the last syncs did: read by /healthz, ProxyStatus and the kopf probe."""

    started: float = field(default_factory=time.monotonic)
    last_success_time: datetime | None = None
    last_duration: float = 0.0
    last_kind: str = ""
    syncs: int = 0
    failures: int = 0
    last_error: str = ""
    services: int = 0
    endpoints: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    checksum: str = ""
    in_sync: bool = False
    # port -> (Service, {IP version: local endpoints of that family})
    health_checks: dict[int, tuple[str, dict[int, int]]] = field(default_factory=dict)
    # IP version -> NodePort -> what the localhost NodePort proxy serves (after every sync)
    localhost_nodeports: dict[int, dict[int, LocalhostNodePort]] = field(default_factory=dict)
    conditions: list[dict[str, str]] = field(default_factory=list)  # more ProxyStatus conditions (kubeproxy_watch)
    generation: int = 0  # bumped whenever anything above changes


class Syncer:
    def __init__(self, dataplane: Dataplane, settings: Settings, metrics: Metrics) -> None:
        self.dp = dataplane
        self.settings = settings
        self.metrics = metrics
        self.status = Status()
        # kube-proxy's health rule: its healthTimeout is 2 x --sync-period; like its SyncLoop,
        # the loop counts as updated at its start (a first sync that fails is not late yet)
        self.health = ProxyHealth(2 * settings.sync_period)
        self.health.updated(time.monotonic())
        self.changes = ChangeTracker(settings, metrics, self.health)
        self.schedule = Schedule(settings.min_sync_period, settings.sync_period)
        self.first_sync = asyncio.Event()  # the table is programmed from the initial lists
        self.changed = asyncio.Event()  # status changed (for the ProxyStatus writer)
        self.on_synced: list[Callable[[Status], Awaitable[None]]] = []  # e.g. health-check servers
        self.sync_starts: deque[float] = deque(maxlen=64)  # monotonic start of recent syncs
        self.checksum_due = False  # after a full or checked sync, computed when idle
        self.compile_skipped: list[Skipped] = []  # left out by the compiler (conflicts, orphans)

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        await self.changes.loaded.wait()
        log.info("initial lists loaded: first sync")
        wake = self.changes.wake
        while True:
            wake.clear()  # every change queued so far is seen below (a later one sets it again)
            now = time.monotonic()
            at = self.schedule.next_sync(now, bool(self.changes.pending) or self.dp.sync_due)
            if at is not None and at <= now:
                with contextlib.suppress(Exception):  # recorded (status, metrics, log); the schedule retries
                    await self.sync_once()
                continue
            if at is None and self.checksum_due:  # nothing else waits: now is the time for it
                await self.refresh_checksum()
                continue
            if at is None and self.schedule.stats_stale and self.schedule.stats_due(now):
                await self.refresh_stats()  # only the counts were due
                continue
            until = self.schedule.idle_until() if at is None else at
            with contextlib.suppress(TimeoutError):  # a change wakes it early: look again
                await asyncio.wait_for(wake.wait(), timeout=max(0.0, until - now))

    async def sync_once(self) -> SyncResult:
        """One sync: the pending changes into the dataplane, compile + commit in a worker thread,
        then the bookkeeping of a success (or of a failure, re-raised)."""
        start = time.monotonic()
        self.sync_starts.append(start)
        sync = self.schedule.started(start)
        if sync.retry_refused:
            self.dp.retry_refused()
        triggers = self.changes.apply(self.dp)
        stats_due = self.schedule.stats_due(start)
        try:
            result, stats, localhost = await asyncio.get_running_loop().run_in_executor(
                None, self._job, sync, stats_due, triggers
            )
        except Exception as e:
            self._record_failure(e)
            raise
        self.schedule.succeeded(sync, result.full)
        if sync.full or result.full:
            heap.settle()
        if sync.full or sync.check:
            heap.trim()
        self.checksum_due = self.checksum_due or sync.full or sync.check or result.full
        self._record_success(result, stats, start)
        self.status.localhost_nodeports = localhost
        await self._notify()
        self._observe(result, triggers)
        return result

    def _job(
        self, sync: Sync, stats_due: bool, triggers: list[Trigger]
    ) -> tuple[SyncResult, Stats | None, dict[int, dict[int, LocalhostNodePort]]]:
        """Runs in a worker thread while the event loop only queues new changes. A first load
        tops its inputs up from the change tracker, here (``ChangeTracker.top_up``)."""
        if sync.full:
            self.dp.forget()
        result = self.dp.sync(top_up=lambda: triggers.extend(self.changes.top_up(self.dp)))
        if sync.check and not result.full and not self.dp.verify():
            log.warning("the nftproxy table was changed behind our back: repairing it (full sync)")
            result = self.dp.sync()
        # The counts walk the whole table (~4 ms at 10k Services, ~70 ms at 50k): not after
        # every partial sync, at most once per STATS_PERIOD (refreshed later if skipped now).
        stats = self._stats() if sync.full or sync.check or result.full or stats_due else None
        # after every sync (the endpoints a localhost NodePort uses are as fresh as the table's);
        # the same object while no localhost NodePort changed, so the proxy's update is a no-op
        return result, stats, self.dp.localhost_nodeports()

    def _record_failure(self, e: Exception) -> None:
        now = time.monotonic()
        self.schedule.failed(now)  # the kernel may hold anything now: a full sync next
        self.status.failures += 1
        self.status.last_error = str(e)
        self.status.in_sync = False
        self.status.generation += 1
        self.metrics.sync_failed()
        self.changed.set()
        log.error("sync failed, retrying in %.2fs: %s", max(0.0, self.schedule.retry_at - now), e)

    def _record_success(self, result: SyncResult, stats: Stats | None, start: float) -> None:
        self.first_sync.set()
        s = self.status
        self.health.updated(time.monotonic())
        s.last_success_time = datetime.now(UTC)
        s.last_duration = result.seconds
        s.last_kind = "full" if result.full else "partial"
        s.syncs += 1
        s.last_error = ""
        # In sync: the kernel holds every change queued before this sync began. One queued while
        # it ran goes in with the next (min_sync_period on): under steady churn there is always
        # one, and a condition that flaps False at every sync would tell users nothing.
        s.in_sync = not self.dp.sync_due and not self.changes.queued_before(start)
        if stats is None:
            self.schedule.stats_stale = True
            self._set_skipped()  # parse failures are known now
        else:
            self._set_stats(stats)
        s.generation += 1
        self.changed.set()

    def _set_stats(self, stats: Stats) -> None:
        s = self.status
        s.services, s.endpoints, self.compile_skipped, s.health_checks, no_local = stats
        for (policy, version), n in no_local.items():
            self.metrics.no_local_endpoints.labels(policy, f"IPv{version}").set(n)
        self.schedule.stats_computed(time.monotonic())
        self.metrics.services.set(s.services)
        self.metrics.endpoints.set(s.endpoints)
        self._set_skipped()

    def _set_skipped(self) -> None:
        s = self.status
        every = (*self.changes.skipped(), *self.compile_skipped)
        s.skipped = sorted({str(x): x for x in every}.values(), key=str)
        self.metrics.skipped.set(len(s.skipped))

    def _observe(self, result: SyncResult, triggers: list[Trigger]) -> None:
        now = time.time()
        for family, t in triggers:
            self.metrics.network_programming.labels(family).observe(max(0.0, now - t))
        self.metrics.synced(result.seconds, result.full, now)
        for c in result.cleanups:
            family = "IPv4" if c.family.version == 4 else "IPv6"
            if c.conntrack:
                self.metrics.conntrack_duration.labels(family).observe(c.seconds)
                self.metrics.conntrack_deleted.labels(family).inc(c.deleted)
            if c.failed:
                self.metrics.cleanup_failures.labels(family).inc()
        (log.info if result.full else log.debug)(
            "synced (%s): %d ops, %d element changes in %.3fs",
            self.status.last_kind,
            result.operations,
            result.element_changes,
            result.seconds,
        )

    async def refresh_checksum(self) -> None:
        """The checksum of the programmed contents walks every element (~90 ms at 10k Services,
        ~0.9 s at 50k): computed after a full or checked sync only once nothing waits, so a
        change queued meanwhile (e.g. right after the first sync) is not held up by it."""
        self.checksum_due = False
        self.status.checksum = await asyncio.get_running_loop().run_in_executor(None, self.dp.checksum)
        self.status.generation += 1
        self.changed.set()

    def _stats(self) -> Stats:
        return (*self.dp.stats(), self.dp.health_checks(), self.dp.no_local_endpoints())

    async def refresh_stats(self) -> None:
        """The counts skipped by the last partial syncs (nothing else changes)."""
        stats = await asyncio.get_running_loop().run_in_executor(None, self._stats)
        self._set_stats(stats)
        self.status.generation += 1
        self.changed.set()
        await self._notify()

    async def _notify(self) -> None:
        """The ``on_synced`` hooks; one that fails is logged (the sync stands, the others run)."""
        for hook in self.on_synced:
            try:
                await hook(self.status)
            except Exception as e:
                log.warning("after the sync: %s failed: %s", getattr(hook, "__name__", hook), e)

    def set_conditions(self, conditions: list[dict[str, str]]) -> bool:
        """More ProxyStatus conditions (kubeproxy_watch's); True if they changed."""
        if self.status.conditions == conditions:
            return False
        self.status.conditions = conditions
        self.status.generation += 1
        self.changed.set()
        return True

    # -- health -----------------------------------------------------------------------------
    def in_sync(self) -> bool:
        """The ProxyStatus condition InSync: the last sync left nothing behind and no change has
        waited too long since (kube-proxy's health rule)."""
        return self.status.in_sync and self.proxy_health().healthy

    def proxy_health(self, now: float | None = None) -> Health:
        """kube-proxy's rule (proxy_health.py): unhealthy once a change has waited 2 x
        --sync-period for a successful sync."""
        return self.health.health(time.monotonic() if now is None else now)
