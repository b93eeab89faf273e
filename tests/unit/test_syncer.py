"""The syncer's decisions, with the fake backend: no sync before the initial lists, debounced
batches, retries after a refused transaction, health, stats for ProxyStatus."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.backend import NftError
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.transaction import Transaction
from nftproxy.operator import changes as changes_module
from nftproxy.operator import syncer as syncer_module
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.schedule import STATS_PERIOD
from nftproxy.operator.status import render_status
from nftproxy.operator.syncer import Syncer
from testkit.k8s import objects as k
from tests.support.clock import run_in_virtual_time
from tests.support.poison import BAD_ADDRESS, POISON_PORT, poisoned, refused_by_the_fake
from tests.support.syncer import elements, make, settings, svc


def test_nothing_is_synced_before_the_initial_lists_are_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        syncer, fake = make()
        task = asyncio.create_task(syncer.run())
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))
        await asyncio.sleep(0.05)
        assert fake.transactions == []  # a restart must never apply a half-empty table
        syncer.changes.mark_loaded()
        await asyncio.wait_for(syncer.first_sync.wait(), 2)
        assert ("10.96.0.1",) in elements(fake, "cluster-ips")
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_syncs_are_spaced_by_min_sync_period_while_changes_keep_coming(monkeypatch: pytest.MonkeyPatch) -> None:
    """Changes every 10 ms for 1.2 s with --min-sync-period 0.3s: each sync starts at least
    0.3 s after the one before, syncs still happen during the stream (batched, not starved), no
    more than the period allows, and the last change is in the table. In virtual time (the
    syncer's monotonic clock included): a loaded machine changes nothing."""

    async def go() -> None:
        period = 0.3
        loop = asyncio.get_running_loop()
        syncer, fake = make(min_sync_period=period)
        task = asyncio.create_task(syncer.run())
        syncer.changes.mark_loaded()
        await asyncio.wait_for(syncer.first_sync.wait(), 2)
        first = len(syncer.sync_starts)
        t0 = loop.time()
        i = 0
        while loop.time() - t0 < 1.2:
            syncer.changes.service_changed(f"default/s{i}", svc(f"s{i}", f"10.96.{1 + i // 250}.{1 + i % 250}"))
            i += 1
            await asyncio.sleep(0.01)
        await asyncio.sleep(2 * period)
        starts = list(syncer.sync_starts)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert gaps and min(gaps) >= period - 1e-9, gaps
        during = [t for t in starts[first:] if t <= t0 + 1.2 + 1e-9]
        assert len(during) == 4, f"{len(during)} syncs while changes kept coming for 1.2 s"  # at +0.3 … +1.2
        assert len(elements(fake, "cluster-ips")) == i, "every change is in the table"
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_a_change_that_waits_out_the_min_sync_period_makes_one_sync_not_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change queued while the loop waits out --min-sync-period goes into the sync that
    follows; no empty sync comes one period later (it held back the next change until then)."""

    async def go() -> None:
        syncer, fake = make(min_sync_period=1.0)
        syncer.changes.mark_loaded()
        await syncer.sync_once()  # the first sync, before the loop starts (boot.py)
        task = asyncio.create_task(syncer.run())
        await asyncio.sleep(0.5)
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))  # during the wait: synced at +1 s
        await asyncio.sleep(1.0)
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)} and syncer.status.syncs == 2
        await asyncio.sleep(1.7)  # 2.2 s after the change's sync
        assert syncer.status.syncs == 2, "no empty sync after it"
        loop = asyncio.get_running_loop()
        t = loop.time()
        syncer.changes.service_changed("default/b", svc("b", "10.96.0.2"))
        await asyncio.sleep(0.01)
        assert syncer.status.syncs == 3 and loop.time() - t < 0.02, "the next change is not held back"
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


class FlakyBackend(FakeBackend):
    """The kernel refuses the next ``fails`` transactions (then works again)."""

    def __init__(self) -> None:
        super().__init__()
        self.fails = 0
        self.refused = 0

    def apply(self, *txs: Transaction) -> None:
        self._refuse()
        super().apply(*txs)

    def load(self, steps: Iterable[LoadStep]) -> int:
        self._refuse()
        return super().load(steps)

    def _refuse(self) -> None:
        if self.fails:
            self.fails -= 1
            self.refused += 1
            raise NftError("Error: Could not process rule: No buffer space available")


def test_a_refused_sync_is_retried_with_exponential_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel refuses three syncs in a row, then accepts: the failure is reported while it
    lasts, the loop tries again 0.5 s after the first failure, then 1 s, then 2 s after the next
    (doubling), the failures are counted, and the fourth attempt (a full sync: the kernel may hold
    anything after a failure) programs the change. In virtual time: the waits are exact, and cost
    nothing."""

    async def go() -> None:
        backend = FlakyBackend()
        s = settings()
        syncer = Syncer(Dataplane(backend, s.proxy), s, Metrics())
        syncer.changes.mark_loaded()
        await syncer.sync_once()
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))
        backend.fails = 3
        with pytest.raises(NftError, match="No buffer space"):
            await syncer.sync_once()  # reported while it lasts
        st = render_status(syncer)
        assert st["failures"] == 1 and "No buffer space" in st["lastError"]
        assert st["conditions"][0]["status"] == "False"
        task = asyncio.create_task(syncer.run())
        await asyncio.sleep(10)
        assert backend.refused == 3 and syncer.status.failures == 3 and syncer.status.syncs == 2
        starts = list(syncer.sync_starts)[-4:]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert gaps == pytest.approx([0.5, 1.0, 2.0], abs=1e-9), gaps  # 0.5 s, then twice that each time
        assert syncer.status.last_kind == "full" and ("10.96.0.1",) in elements(backend, "cluster-ips")
        st = render_status(syncer)
        assert st["failures"] == 3 and st["lastError"] is None and st["conditions"][0]["status"] == "True"
        text = generate_latest(syncer.metrics.registry).decode()
        assert 'kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 3.0' in text
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_health_fails_once_a_change_has_waited_two_sync_periods_for_a_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-proxy's rule (ProxyHealthServer, healthTimeout 2 x --sync-period, here 10 s), fed by
    the syncer: the initial lists and refused syncs with nothing new queued leave it healthy (the
    rules in place are still right); a change after the lists that waits 10 s for a successful
    sync makes it unhealthy, whatever the retries; the sync that programs it makes it healthy."""

    async def go() -> None:
        backend = FlakyBackend()
        s = settings(sync_period=5.0)
        syncer = Syncer(Dataplane(backend, s.proxy), s, Metrics())
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))  # the initial list
        syncer.changes.mark_loaded()
        backend.fails = 10**6
        with pytest.raises(NftError):
            await syncer.sync_once()  # the first sync, refused
        await asyncio.sleep(60)
        assert syncer.proxy_health().healthy  # nothing queued since the lists
        assert render_status(syncer)["conditions"][0]["reason"] == "SyncFailed"
        syncer.changes.service_changed("default/b", svc("b", "10.96.0.2"))
        loop = asyncio.create_task(syncer.run())  # retries with backoff, whatever the change
        await asyncio.sleep(9.9)
        assert syncer.proxy_health().healthy and backend.refused > 3
        await asyncio.sleep(0.1)
        health = syncer.proxy_health()
        assert not health.healthy
        assert health.message() == (
            "a change queued 10s ago is not synced yet (unhealthy after 10s: 2 x --sync-period)"
        )
        backend.fails = 0
        await asyncio.sleep(30)  # the next retry (backoff: at most 30 s) goes through
        assert syncer.proxy_health().healthy and ("10.96.0.2",) in elements(backend, "cluster-ips")
        assert render_status(syncer)["conditions"][0]["status"] == "True"
        loop.cancel()
        # a new change, synced in time: never unhealthy
        syncer.changes.service_changed("default/c", svc("c", "10.96.0.3"))
        await asyncio.sleep(9)
        await syncer.sync_once()
        await asyncio.sleep(30)
        assert syncer.proxy_health().healthy

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_bad_input_is_reported_and_the_last_good_version_kept() -> None:
    async def go() -> None:
        syncer, fake = make()
        syncer.changes.mark_loaded()
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))
        await syncer.sync_once()
        broken = svc("a", "10.96.0.1")
        broken["spec"]["ports"] = [{"port": 0}]
        syncer.changes.service_changed("default/a", broken)
        await syncer.sync_once()
        assert ("10.96.0.1",) in elements(fake, "cluster-ips")  # still served as it was
        assert [str(x) for x in syncer.status.skipped] == ["Service default/a: spec.ports[0]: port 0 is not in 1-65535"]
        syncer.changes.service_changed("default/a", None)  # deleted: gone, and no longer reported
        await syncer.sync_once()
        assert ("10.96.0.1",) not in elements(fake, "cluster-ips") and syncer.status.skipped == []

    asyncio.run(go())


def test_a_replayed_version_is_not_queued_again() -> None:
    """kopf replays every object when its watches start, right after our own initial list: the
    versions already queued cost neither a parse nor a sync; a new version or a delete does."""

    async def go() -> None:
        syncer, fake = make()
        syncer.changes.mark_loaded()
        a = svc("a", "10.96.0.1")
        a["metadata"]["resourceVersion"] = "7"
        syncer.changes.service_changed("default/a", a)
        await syncer.sync_once()
        syncs = syncer.status.syncs
        syncer.changes.wake.clear()
        syncer.changes.service_changed("default/a", a)  # the replay
        assert syncer.changes.pending == {} and not syncer.changes.wake.is_set()
        moved = svc("a", "10.96.0.2")
        moved["metadata"]["resourceVersion"] = "8"
        syncer.changes.service_changed("default/a", moved)
        assert list(syncer.changes.pending) == [("svc", "default/a")]
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.2",)} and syncer.status.syncs == syncs + 1
        syncer.changes.service_changed("default/a", None)
        syncer.changes.service_changed("default/a", moved)  # re-created with the version we saw last
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.2",)}

    asyncio.run(go())


def test_counts_are_not_computed_after_every_partial_sync_but_catch_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts walk the whole table (~70 ms at 50k Services): ten partial syncs in quick
    succession do not compute them, and they are right within STATS_PERIOD afterwards, with no
    further change (computed once then). In virtual time: the syncs take none."""

    async def go() -> None:
        loop = asyncio.get_running_loop()
        syncer, fake = make()
        calls: list[float] = []
        stats = syncer.dp.stats

        def counted() -> Any:
            calls.append(loop.time())
            return stats()

        syncer.dp.stats = counted  # type: ignore[method-assign]
        task = asyncio.create_task(syncer.run())
        syncer.changes.mark_loaded()
        await asyncio.wait_for(syncer.first_sync.wait(), 2)
        first, counted_before = syncer.status.syncs, len(calls)
        t0 = loop.time()
        for i in range(10):
            syncer.changes.service_changed(f"default/s{i}", svc(f"s{i}", f"10.96.1.{i + 1}"))
            while syncer.status.syncs == first + i:
                await asyncio.sleep(0.001)
        assert loop.time() - t0 < STATS_PERIOD
        assert calls[counted_before:] == [], "counts computed after a partial sync"
        await asyncio.sleep(STATS_PERIOD + 0.5)
        assert len(calls[counted_before:]) == 1, "the counts caught up once"
        assert syncer.status.services == 10 and len(elements(fake, "cluster-ips")) == 10
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_the_checksum_waits_until_no_change_is_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checksum walks every element (~0.9 s at 50k Services): a change queued during the
    first (full) sync is synced first, then the checksum is computed, with no further change."""

    async def go() -> None:
        syncer, fake = make()
        at_checksum: list[int] = []
        checksum = syncer.dp.checksum

        def recorded() -> str:
            at_checksum.append(syncer.status.syncs)
            return checksum()

        syncer.dp.checksum = recorded  # type: ignore[method-assign]

        async def queue_once(_: object) -> None:
            if syncer.status.syncs == 1:
                syncer.changes.service_changed("default/late", svc("late", "10.96.0.9"))

        syncer.on_synced.append(queue_once)
        task = asyncio.create_task(syncer.run())
        syncer.changes.mark_loaded()
        for _ in range(200):
            if syncer.status.checksum:
                break
            await asyncio.sleep(0.01)
        assert at_checksum == [2], "the queued change was synced before the checksum"
        assert syncer.status.checksum and ("10.96.0.9",) in elements(fake, "cluster-ips")
        task.cancel()

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


class _SlowLoad(FakeBackend):
    """A first load whose second step waits until ``during`` has run on the event loop (a watch
    event arriving while the kernel loads)."""

    def __init__(self) -> None:
        super().__init__()
        self.during: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def load(self, steps: Iterable[LoadStep]) -> int:
        def waiting() -> Iterator[LoadStep]:
            for i, step in enumerate(steps):
                if i == 1 and self.during is not None and self.loop is not None:
                    asyncio.run_coroutine_threadsafe(self.during(), self.loop).result(5)
                yield step

        return super().load(waiting())


def test_a_service_created_during_the_first_load_is_in_its_last_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our watches start as the first sync begins: a Service (and its slice) created while
    the first load runs goes into that load (Dataplane.sync(top_up=…)), not into a sync after it; a
    Node change then waits for the next sync (it rebuilds the table)."""

    async def go() -> None:
        fake = _SlowLoad()
        s = settings()
        syncer = Syncer(Dataplane(fake, s.proxy), s, Metrics())
        syncer.dp.bulk_elements, syncer.dp.stream_services, syncer.dp.stream_chunks = 1, 1, 3
        for i in range(6):
            syncer.changes.service_changed(f"default/s{i}", svc(f"s{i}", f"10.96.0.{i + 1}"))
        fake.loop = asyncio.get_running_loop()

        async def during() -> None:
            syncer.changes.service_changed("default/new", svc("new", "10.96.0.99"))
            ep = k.endpoint_slice("new-x", "new", [k.endpoint("10.244.0.99")], [k.port(8080, "http")])
            syncer.changes.slice_changed("default/new-x", ep)
            addresses = [{"type": "InternalIP", "address": "198.18.0.7"}]
            node = {"metadata": {"name": "n1"}, "status": {"addresses": addresses}}
            syncer.changes.node_changed(node)

        fake.during = during
        seen: list[tuple[int, list[tuple[str, str]], Any]] = []

        async def synced(status: Any) -> None:
            seen.append((status.syncs, list(syncer.changes.pending), syncer.dp.config.node_ips))

        syncer.on_synced.append(synced)
        syncer.changes.mark_loaded()
        task = asyncio.create_task(syncer.run())
        for _ in range(300):
            if len(seen) >= 2 and syncer.status.in_sync:
                break
            await asyncio.sleep(0.01)
        assert seen[0][:2] == (1, [("node", "n1")])  # the first sync took all but the Node's change
        assert len(fake.loads) == 5  # 3 chunks, the new Service, the dispatch maps
        assert ("10.96.0.99", "tcp", "80") in {el.key for ld in fake.loads[-1].loads for el in ld.elements}
        assert seen[1][0] == 2 and not seen[1][1] and str(seen[1][2][0]) == "198.18.0.7"  # then the Node's
        assert ("10.96.0.99", "tcp", "80") in elements(fake, "service-ips")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)


def test_a_refused_service_is_skipped_in_status_and_retried_at_the_hourly_full_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("nftproxy.dataplane.sync.compile_fragment", poisoned())

    async def go() -> None:
        syncer, fake = make()
        fake.refuse = refused_by_the_fake
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))
        syncer.changes.service_changed("default/bad", k.service("bad", ["10.96.0.2"], [k.port(POISON_PORT, "http")]))
        syncer.changes.mark_loaded()
        await syncer.sync_once()  # no exception: the sync went through, without "bad"
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}
        assert [f"{s.namespace}/{s.name}" for s in syncer.status.skipped] == ["default/bad"]
        assert syncer.status.failures == 0 and syncer.status.in_sync
        assert render_status(syncer)["skipped"][0]["reason"].startswith("the kernel refused its IPv4 rules: Error:")

        fake.refuse = None  # what the kernel refused, it takes now (say, a newer nft)
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}  # not retried before the full sync
        syncer.schedule.full_due = syncer.schedule.retry_refused_due = True  # the hourly full sync's
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.2",), (BAD_ADDRESS,)}  # taken now
        assert syncer.status.skipped == []

    asyncio.run(go())


class _ChangeDuringEveryCommit(FakeBackend):
    """Steady churn: a watch event arrives while each transaction is being committed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, change: Any) -> None:
        super().__init__()
        self.loop, self.change = loop, change

    def apply(self, *txs: Transaction) -> None:
        super().apply(*txs)
        self.loop.call_soon_threadsafe(self.change)


def test_in_sync_stays_true_under_steady_churn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change queued while a sync runs goes in with the next: the ProxyStatus stays InSync True
    (under churn there is always one, and the condition must not flap with every sync)."""

    async def go() -> None:
        n = itertools.count()

        def change() -> None:
            i = next(n)
            syncer.changes.service_changed(f"default/c{i}", svc(f"c{i}", f"10.96.1.{1 + i % 250}"))

        backend = _ChangeDuringEveryCommit(asyncio.get_running_loop(), change)
        s = settings()
        syncer = Syncer(Dataplane(backend, s.proxy), s, Metrics())
        syncer.changes.mark_loaded()
        await syncer.sync_once()
        reasons = []
        for _ in range(5):
            await asyncio.sleep(0)  # the change made during the commit is queued now
            assert syncer.changes.pending, "a change waits for the next sync"
            reasons.append(render_status(syncer)["conditions"][0]["reason"])
            await syncer.sync_once()
        assert reasons == ["Synced"] * 5
        assert len(elements(backend, "cluster-ips")) == 5  # each change went in with the next sync

    run_in_virtual_time(go, monkeypatch, syncer_module, changes_module)
