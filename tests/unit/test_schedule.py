"""The sync schedule, with plain numbers for the clock (as kube-proxy's BoundedFrequencyRunner
tests use a fake clock): min sync period, the periodic check and the hourly full sync, retries
after failures, the counts' refresh."""

from __future__ import annotations

from nftproxy.operator.schedule import FULL_SYNC_PERIOD, Schedule, Sync


def synced(s: Schedule, at: float, full: bool = False) -> Sync:
    """A sync started at ``at`` that went through."""
    sync = s.started(at)
    s.succeeded(sync, full or sync.full)
    return sync


def test_the_first_sync_is_a_full_one_and_starts_at_once() -> None:
    s = Schedule(min_interval=1.0, check_interval=30.0)
    at = s.next_sync(100.0, pending=False)
    assert at is not None and at <= 100.0
    sync = synced(s, 100.0)
    assert sync.full and sync.check
    assert s.next_sync(100.5, pending=False) is None  # nothing to do until a change or the check


def test_a_burst_of_changes_makes_one_sync_at_the_end_of_the_min_sync_period() -> None:
    """kube-proxy's runner: runs asked for during the min interval are coalesced and deferred."""
    s = Schedule(min_interval=1.0, check_interval=30.0)
    synced(s, 0.0)
    for now in (0.5, 0.999):  # a change at +0.5 s and one at +0.999 s: both wait
        assert s.next_sync(now, pending=True) == 1.0
    sync = synced(s, 1.0)  # both in one sync
    assert not sync.full and not sync.check
    assert s.next_sync(1.001, pending=True) == 2.0  # the next change waits a period again
    assert s.next_sync(5.0, pending=True) == 2.0  # … or none once the period is over: at once (<= now)


def test_with_no_min_sync_period_a_change_is_synced_at_once() -> None:
    s = Schedule(min_interval=0.0, check_interval=30.0)
    synced(s, 0.0)
    assert s.next_sync(0.25, pending=True) == 0.0


def test_the_table_is_checked_every_sync_period_with_or_without_changes() -> None:
    s = Schedule(min_interval=1.0, check_interval=30.0)
    synced(s, 0.0)
    assert s.idle_until() == 30.0  # idle: look again then
    assert s.next_sync(29.9, pending=False) is None
    assert s.next_sync(30.0, pending=False) == 1.0  # due (and past the min period): now
    sync = synced(s, 30.0)
    assert sync.check and not sync.full
    assert s.idle_until() == 60.0
    # under steady churn too: the sync after the period also checks
    for t in range(31, 61):
        sync = synced(s, float(t))
        assert sync.check == (t == 60)


def test_every_element_is_compared_hourly_and_refused_services_retried() -> None:
    s = Schedule(min_interval=1.0, check_interval=30.0)
    synced(s, 0.0)
    t = 0.0
    while t < FULL_SYNC_PERIOD - 30.0:
        t += 30.0
        assert s.next_sync(t, pending=False) is not None
        sync = synced(s, t)
        assert sync.check and not sync.full and not sync.retry_refused
    sync = synced(s, FULL_SYNC_PERIOD)
    assert sync.full and sync.retry_refused
    assert not synced(s, FULL_SYNC_PERIOD + 30.0).full


def test_a_partial_sync_that_compared_the_whole_table_counts_as_the_full_one() -> None:
    s = Schedule(min_interval=0.0, check_interval=30.0)
    synced(s, 0.0)
    synced(s, 10.0, full=True)  # e.g. the dataplane found its state unknown
    assert s.last_full == 10.0 and not s.full_due


def test_a_failed_sync_is_retried_with_exponential_backoff_then_in_full() -> None:
    """tenacity's wait_exponential(multiplier=0.5, max=30), counted from each failure's end;
    changes queued meanwhile wait for the retry (no faster retries for a busy cluster)."""
    s = Schedule(min_interval=1.0, check_interval=30.0)
    synced(s, 0.0)
    t, waits = 10.0, []
    for _ in range(8):
        sync = s.started(t)
        s.failed(t + 0.1)  # the sync took 0.1 s
        retry = s.next_sync(t + 0.1, pending=True)
        assert retry is not None
        waits.append(round(retry - (t + 0.1), 6))
        t = retry
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    sync = s.started(t)
    assert sync.full  # the kernel may hold anything after a failure
    s.succeeded(sync, True)
    assert s.next_sync(t + 0.5, pending=True) == t + 1.0  # back to the min sync period
    s.started(t + 1.0)
    s.failed(t + 1.0)
    assert s.next_sync(t + 1.0, pending=False) == t + 1.5  # the backoff starts over


def test_a_retry_shorter_than_the_min_sync_period_is_not_held_back_by_it() -> None:
    """As the tenacity retries it replaces: the backoff alone decides when a failed sync is tried again."""
    s = Schedule(min_interval=5.0, check_interval=30.0)
    s.started(0.0)
    s.failed(0.0)
    assert s.next_sync(0.0, pending=False) == 0.5


def test_counts_skipped_by_partial_syncs_are_refreshed_once_a_stats_period_is_over() -> None:
    s = Schedule(min_interval=0.0, check_interval=30.0, stats_interval=1.0)
    synced(s, 0.0)
    s.stats_computed(0.0)
    assert not s.stats_due(0.5)
    s.stats_stale = True  # a partial sync at 0.5 s left them out
    assert s.idle_until() == 1.0 and not s.stats_due(0.9) and s.stats_due(1.0)
    s.stats_computed(1.0)
    assert s.idle_until() == 30.0


def test_the_earliest_next_start_is_what_a_watch_may_hold_its_events_until() -> None:
    s = Schedule(min_interval=1.0, check_interval=30.0)
    assert s.earliest() < 0  # no sync yet: at once
    synced(s, 10.0)
    assert s.earliest() == 11.0
    s.started(12.0)
    s.failed(12.1)
    assert s.earliest() == s.next_sync(12.2, pending=True) == 12.6  # the retry, sooner than 13.0
