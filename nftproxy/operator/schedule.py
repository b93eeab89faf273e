"""When the syncer syncs: a pure schedule over plain numbers (seconds of a monotonic clock), in
the manner of kube-proxy's BoundedFrequencyRunner (pkg/proxy/runner/bounded_frequency_runner.go).

* Changes that arrive within ``min_interval`` (--min-sync-period) of the last sync's start are
  coalesced into one sync at its end: a burst makes one sync, not one per change.
* Every ``check_interval`` (--sync-period) a sync checks the kernel's table (its chains: cheap),
  with or without changes; every ``full_interval`` (hourly) it compares every element with the
  kernel's table, repairing any drift, and tries the Services the kernel refused again (kube-proxy's
  nftables mode does its full syncs hourly too). A full sync counts as a check.
* A failed sync is tried again after an exponential backoff (``retry_first``, doubling up to
  ``retry_max``); the changes queued meanwhile go in with it. After a failure the kernel may hold
  anything: the retry is a full sync.
* The counts ProxyStatus reports are refreshed at most every ``stats_interval`` after partial syncs.

Unlike kube-proxy's runner, ``min_interval`` runs from a sync's start (not its end), and a
failure's backoff is counted from its end. ``Syncer.run`` asks ``next_sync`` and reports each sync
with ``started`` and ``succeeded`` or ``failed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Comparing every element with the kernel costs seconds at 10k Services: like kube-proxy's
# nftables mode, that happens at start, after failures, and hourly; every sync_period only the
# table's chains are checked (cheap), which catches a deleted or rebuilt table.
FULL_SYNC_PERIOD = 3600.0
STATS_PERIOD = 1.0  # seconds: how stale the counts (Services, endpoints, skipped) may get


@dataclass(frozen=True)
class Sync:
    """What one sync is to do besides the changes."""

    full: bool  # compare with the kernel's whole table (start, failures, hourly)
    check: bool  # check the table's chains (every sync_period)
    retry_refused: bool  # the Services the kernel refused are tried again (hourly)


class Schedule:
    def __init__(
        self,
        min_interval: float,
        check_interval: float,
        full_interval: float = FULL_SYNC_PERIOD,
        stats_interval: float = STATS_PERIOD,
        retry_first: float = 0.5,
        retry_max: float = 30.0,
    ) -> None:
        self.min_interval = min_interval
        self.check_interval = check_interval
        self.full_interval = full_interval
        self.stats_interval = stats_interval
        self.retry_first = retry_first
        self.retry_max = retry_max
        self.full_due = True  # nothing is known of the kernel's table yet
        self.check_due = False
        self.retry_refused_due = False
        self.last_start = -math.inf
        self.last_check = -math.inf
        self.last_full = -math.inf
        self.failures = 0  # in a row
        self.retry_at = -math.inf
        self.stats_at = -math.inf  # when the counts were last computed
        self.stats_stale = False  # syncs happened since

    def next_sync(self, now: float, pending: bool) -> float | None:
        """When the next sync is to start (``now`` or earlier: now), or None: none is due yet
        (wait for a change, or until ``idle_until``). ``pending``: changes wait to be synced."""
        self._tick(now)
        if self.failures or pending or self.full_due or self.check_due:
            return self.earliest()
        return None

    def earliest(self) -> float:
        """The earliest the next sync may start: ``min_interval`` after the last one's start, or
        a failure's retry. A watch may hold its events until then (``reflector``): no sync could
        take them sooner."""
        return self.retry_at if self.failures else self.last_start + self.min_interval

    def idle_until(self) -> float:
        """With nothing to sync: when to look again (the next check, or the counts to refresh)."""
        until = self.last_check + self.check_interval
        return min(until, self.stats_at + self.stats_interval) if self.stats_stale else until

    def started(self, now: float) -> Sync:
        self._tick(now)
        self.last_start = now
        sync = Sync(self.full_due, self.check_due, self.retry_refused_due)
        self.retry_refused_due = False
        return sync

    def succeeded(self, sync: Sync, full: bool) -> None:
        """``sync`` (reported by ``started``) went through; ``full``: it compared the whole table."""
        self.failures = 0
        if sync.full or full:
            self.full_due = False
            self.last_full = self.last_start
        if sync.full or sync.check:
            self.check_due = False
            self.last_check = self.last_start

    def failed(self, now: float) -> None:
        """The sync started last failed (at ``now``): retried after the backoff, in full."""
        self.failures += 1
        self.full_due = True
        self.retry_at = now + min(self.retry_max, self.retry_first * 2 ** (self.failures - 1))

    def stats_due(self, now: float) -> bool:
        """Are the counts older than ``stats_interval``?"""
        return now - self.stats_at >= self.stats_interval

    def stats_computed(self, now: float) -> None:
        self.stats_at = now
        self.stats_stale = False

    def _tick(self, now: float) -> None:
        if now - self.last_check >= self.check_interval:
            self.check_due = True
            if now - self.last_full >= self.full_interval:
                self.full_due = self.retry_refused_due = True
