"""The syncer: queued changes in, one nftables transaction per sync out.

Event handlers only call ``*_changed`` (cheap: parse and queue) and wake the syncer. The syncer
waits until the initial lists are loaded, then syncs at most once per ``min_sync_period``,
checks the kernel's table every ``sync_period`` (and compares every element with it hourly,
repairing any drift), and retries failures with exponential backoff. Compile and commit run in a
worker thread; the event loop never waits for the kernel.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nftproxy import heap
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.dataplane.sync import Dataplane, SyncResult
from nftproxy.model.types import Node, Skipped
from nftproxy.operator.intake import Change, Intake, Trigger
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.proxy_health import Health, ProxyHealth
from nftproxy.operator.settings import Settings

log = logging.getLogger("nftproxy.syncer")

# Comparing every element with the kernel costs seconds at 10k Services: like kube-proxy's
# nftables mode, that happens at start, after failures, and hourly; every sync_period only the
# table's chains are checked (cheap), which catches a deleted or rebuilt table.
FULL_SYNC_PERIOD = 3600.0
STATS_PERIOD = 1.0  # seconds: how stale the counts (Services, endpoints, skipped) may get

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
        self.intake = Intake(settings, metrics, self._queued)
        self.loaded = asyncio.Event()  # initial lists complete
        self.first_sync = asyncio.Event()  # the table is programmed from the initial lists
        self.wake = asyncio.Event()
        self.changed = asyncio.Event()  # status changed (for the ProxyStatus writer)
        self.on_synced: list[Callable[[Status], Awaitable[None]]] = []  # e.g. health-check servers
        self.full_due = True  # compare with the kernel's whole table (start, failures, hourly)
        self.retry_refused_due = False  # hourly: Services the kernel refused are tried again
        self.check_due = False  # cheap check of the table's chains (every sync_period)
        self.last_start = 0.0
        self.last_full = 0.0
        self.last_check = 0.0
        self.sync_starts: deque[float] = deque(maxlen=64)  # monotonic start of recent syncs
        self.stats_at = 0.0  # when the counts were last computed
        self.stats_stale = False  # syncs happened since
        self.checksum_due = False  # after a full or checked sync, computed when idle
        self.compile_skipped: list[Skipped] = []  # left out by the compiler (conflicts, orphans)
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop's, for the top-up
        self.top_up_triggers: list[Trigger] = []  # trigger times of the changes a first load took

    # -- intake (event loop thread): see intake.py ----------------------------------------
    @property
    def pending(self) -> dict[tuple[str, str], Change]:
        return self.intake.pending

    @property
    def node(self) -> Node | None:
        return self.intake.node

    def service_changed(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self.intake.service_changed(key, obj)

    def slice_changed(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self.intake.slice_changed(key, obj)

    def node_changed(self, obj: Mapping[str, Any]) -> None:
        self.intake.node_changed(obj)

    def node_deleted(self) -> None:
        self.intake.node_deleted()

    def service_cidr_changed(self, name: str, obj: Mapping[str, Any] | None) -> None:
        self.intake.service_cidr_changed(name, obj)

    def server_version(self, info: Mapping[str, Any]) -> None:
        self.intake.server_version(info)

    def held(self) -> set[tuple[str, str]]:
        """(kind, key) of every Service and EndpointSlice held (as last listed or watched)."""
        return self.intake.held()

    def _queued(self) -> None:
        if self.loaded.is_set():  # during the initial lists (10^4 objects) once, at the end
            # kube-proxy's QueuedUpdate: a change after the initial lists starts the health clock
            self.health.queued_update(time.monotonic())
            self.intake.publish_metrics()
            self.wake.set()

    def mark_loaded(self) -> None:
        """The initial lists are in: syncing may start (never from a half-empty cache)."""
        self.loaded.set()
        self.intake.publish_metrics()
        self.wake.set()

    def _apply_pending(self, nodes: bool = True) -> list[Trigger]:
        return self.intake.apply(self.dp, nodes)

    def _top_up(self) -> None:
        """``Dataplane.sync``'s ``top_up``, in the worker thread, before a first load's last step: the Service
        and EndpointSlice changes queued meanwhile go into the dataplane (on the event loop
        thread, while this one waits), to be loaded with it. kopf's watches start as the first
        sync begins: a change made then (~0.7 s of load at 10k Services) otherwise waited for the
        load to end and then for a sync of its own. A Node change waits (it rebuilds everything)."""
        loop = self.loop
        if loop is None:
            return
        done: concurrent.futures.Future[list[Trigger]] = concurrent.futures.Future()

        def apply() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(self._apply_pending(nodes=False) if self.pending else [])
                except BaseException as e:
                    done.set_exception(e)

        try:
            loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the loop is closed: shutting down
            return
        try:
            self.top_up_triggers += done.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            if not done.cancel():  # running after all: wait for it
                self.top_up_triggers += done.result()

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.loaded.wait()
        log.info("initial lists loaded: first sync")
        while True:
            if not self.pending and not self.full_due and not self.check_due and not self.dp.sync_due:
                if self.checksum_due:  # nothing else waits: now is the time for it
                    await self.refresh_checksum()
                    continue
                until_check = self.last_check + self.settings.sync_period - time.monotonic()
                until_stats = self.stats_at + STATS_PERIOD - time.monotonic() if self.stats_stale else until_check
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=max(0.0, min(until_check, until_stats)))
                except TimeoutError:
                    if time.monotonic() - self.last_check < self.settings.sync_period:
                        await self.refresh_stats()  # only the counts were due
                        continue
                    self.check_due = True
                    if time.monotonic() - self.last_full >= FULL_SYNC_PERIOD:
                        self.full_due = self.retry_refused_due = True
                if not self.pending and not self.full_due and not self.check_due and not self.dp.sync_due:
                    self.wake.clear()  # woken by a change that an earlier sync already took
                    continue
            delay = self.last_start + self.settings.min_sync_period - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.sync_with_retries()  # sync_once clears the wake-up: its changes are in it

    async def sync_with_retries(self) -> None:
        import tenacity  # noqa: PLC0415  (not before the first sync: boot.py)

        retrying = tenacity.AsyncRetrying(
            wait=tenacity.wait_exponential(multiplier=0.5, max=30),
            retry=tenacity.retry_if_exception_type(Exception),
            before_sleep=lambda rs: log.warning("sync failed, retrying in %.1fs", rs.upcoming_sleep),
        )
        async for attempt in retrying:
            with attempt:
                await self.sync_once()

    async def sync_once(self) -> SyncResult:
        """One sync: queued changes into the dataplane, compile + commit in a worker thread, then
        the bookkeeping of a success (or of a failure, re-raised for the retry)."""
        self.last_start = time.monotonic()
        self.sync_starts.append(self.last_start)
        full, check = self.full_due, self.check_due
        if self.retry_refused_due:
            self.retry_refused_due = False
            self.dp.retry_refused()
        # Every change queued so far goes into this sync: the wake-up they set is spent (kept, a
        # change that arrived while the loop waited out --min-sync-period made an empty sync one
        # period later, and held back the next real change until then).
        self.wake.clear()
        triggers = self._apply_pending()
        loop = asyncio.get_running_loop()
        self.top_up_triggers = []
        try:
            result, stats, checksum_due, localhost = await loop.run_in_executor(None, self._job, full, check)
        except Exception as e:
            self._record_failure(e)
            raise
        self._observe_programming_latency(triggers + self.top_up_triggers)
        self._housekeeping(full or result.full, full or check)
        self.checksum_due = self.checksum_due or checksum_due
        self._record_success(result, stats)
        self.status.localhost_nodeports = localhost
        for hook in self.on_synced:
            await hook(self.status)
        self._observe_sync(result)
        return result

    def _record_failure(self, e: Exception) -> None:
        self.status.failures += 1
        self.status.last_error = str(e)
        self.status.in_sync = False
        self.status.generation += 1
        self.metrics.sync_failed()
        self.full_due = True  # the kernel may hold anything now: compare with it next time
        self.changed.set()
        log.error("sync failed: %s", e)

    def _observe_programming_latency(self, triggers: list[Trigger]) -> None:
        now = time.time()
        for family, t in triggers:
            self.metrics.network_programming.labels(family).observe(max(0.0, now - t))

    def _housekeeping(self, was_full: bool, was_checked: bool) -> None:
        if was_full:
            self.full_due = False
            self.last_full = self.last_start
            heap.settle()
        if was_checked:
            self.check_due = False
            self.last_check = self.last_start
            heap.trim()

    def _record_success(self, result: SyncResult, stats: Stats | None) -> None:
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
        since = self.intake.pending_since
        s.in_sync = not self.dp.sync_due and (not self.pending or (since is not None and since >= self.last_start))
        if stats is None:
            self.stats_stale = True
            self._set_skipped(self.compile_skipped)  # parse failures are known now
        else:
            self._set_stats(stats)
        s.generation += 1
        self.changed.set()

    def _set_stats(self, stats: Stats) -> None:
        s = self.status
        s.services, s.endpoints, self.compile_skipped, s.health_checks, no_local = stats
        for (policy, version), n in no_local.items():
            self.metrics.no_local_endpoints.labels(policy, f"IPv{version}").set(n)
        self.stats_stale = False
        self.metrics.services.set(s.services)
        self.metrics.endpoints.set(s.endpoints)
        self._set_skipped(self.compile_skipped)

    def _set_skipped(self, compile_skipped: list[Skipped]) -> None:
        s = self.status
        s.skipped = sorted({str(x): x for x in (*self.intake.bad.values(), *compile_skipped)}.values(), key=str)
        self.metrics.skipped.set(len(s.skipped))

    def _observe_sync(self, result: SyncResult) -> None:
        self.metrics.synced(result.seconds, result.full, time.time())
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

    def _job(
        self, full: bool, check: bool
    ) -> tuple[SyncResult, Stats | None, bool, dict[int, dict[int, LocalhostNodePort]]]:
        """Runs in a worker thread while the event loop only queues new changes."""
        if full:
            self.dp.forget()
        result = self.dp.sync(top_up=self._top_up)
        if check and not result.full and not self.dp.verify():
            log.warning("the nftproxy table was changed behind our back: repairing it (full sync)")
            result = self.dp.sync()
        # The counts walk the whole table (~4 ms at 10k Services, ~70 ms at 50k): not after
        # every partial sync, at most once per STATS_PERIOD (refreshed later if skipped now).
        due = full or check or result.full or time.monotonic() - self.stats_at >= STATS_PERIOD
        stats = self._stats() if due else None
        # after every sync (the endpoints a localhost NodePort uses are as fresh as the table's);
        # the same object while no localhost NodePort changed, so the proxy's update is a no-op
        return result, stats, full or check or result.full, self.dp.localhost_nodeports()

    async def refresh_checksum(self) -> None:
        """The checksum of the programmed contents walks every element (~90 ms at 10k Services,
        ~0.9 s at 50k): computed after a full or checked sync only once nothing waits, so a
        change queued meanwhile (e.g. right after the first sync) is not held up by it."""
        self.checksum_due = False
        self.status.checksum = await asyncio.get_running_loop().run_in_executor(None, self.dp.checksum)
        self.status.generation += 1
        self.changed.set()

    def _stats(self) -> Stats:
        self.stats_at = time.monotonic()
        return (*self.dp.stats(), self.dp.health_checks(), self.dp.no_local_endpoints())

    async def refresh_stats(self) -> None:
        """The counts skipped by the last partial syncs (nothing else changes)."""
        stats = await asyncio.get_running_loop().run_in_executor(None, self._stats)
        self._set_stats(stats)
        self.status.generation += 1
        self.changed.set()
        for hook in self.on_synced:
            await hook(self.status)

    def set_conditions(self, conditions: list[dict[str, str]]) -> bool:
        """More ProxyStatus conditions (kubeproxy_watch's); True if they changed."""
        if self.status.conditions == conditions:
            return False
        self.status.conditions = conditions
        self.status.generation += 1
        self.changed.set()
        return True

    # -- health -----------------------------------------------------------------------------
    def proxy_health(self, now: float | None = None) -> Health:
        """kube-proxy's rule (proxy_health.py): unhealthy once a change has waited 2 x
        --sync-period for a successful sync."""
        return self.health.health(time.monotonic() if now is None else now)
