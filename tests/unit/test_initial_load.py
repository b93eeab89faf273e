"""The initial list: parsed page by page, retried from scratch, never leaving behind an object
that only a failed attempt saw (kopf's replay would not delete it later)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nftproxy.operator import handlers, kube
from testkit.k8s import objects as k
from tests.support.syncer import elements, make, svc

VERSION = {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}  # the apiserver's /version


def test_a_retried_list_forgets_what_only_the_failed_attempt_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def service_pages(*_: Any) -> Iterator[list[dict[str, Any]]]:
        attempts.append(1)
        if len(attempts) == 1:
            yield [svc("a", "10.96.0.1"), svc("b", "10.96.0.2")]
            raise kube.ApiError(500, "Internal Server Error", "etcd leader changed")
        yield [svc("a", "10.96.0.1")]  # b was deleted meanwhile
        yield [svc("c", "10.96.0.3")]

    def slice_pages(*_: Any) -> Iterator[list[dict[str, Any]]]:
        yield [k.endpoint_slice("a-1", "a", [k.endpoint("10.244.0.2")], [k.port(80, "http")])]

    monkeypatch.setattr(kube, "server_version", lambda api: VERSION)
    monkeypatch.setattr(kube, "service_pages", service_pages)
    monkeypatch.setattr(kube, "endpoint_slice_pages", slice_pages)
    monkeypatch.setattr(kube, "read_node", lambda api, name: None)

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        await handlers.initial_load(ctx)
        assert len(attempts) == 2 and syncer.changes.loaded.is_set()
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.3",)}
        assert syncer.status.services == 2

    asyncio.run(go())


def _versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def test_the_periodic_list_deletes_what_a_watch_outage_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf relists after "410 Gone" without reporting deletions: our hourly list deletes what we
    hold and the API no longer has, but never what kopf reported while the list ran."""
    listing: list[list[dict[str, Any]]] = []

    def service_pages(*_: Any) -> Iterator[list[dict[str, Any]]]:
        yield from listing

    monkeypatch.setattr(kube, "service_pages", service_pages)
    monkeypatch.setattr(kube, "endpoint_slice_pages", lambda *_: iter([]))

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        memo = handlers.memo_for(ctx)
        syncer.changes.mark_loaded()
        for name, ip in (("a", "10.96.0.1"), ("b", "10.96.0.2"), ("c", "10.96.0.3"), ("e", "10.96.0.5")):
            syncer.changes.service_changed(f"default/{name}", _versioned(svc(name, ip), "1"))
        await syncer.sync_once()
        # b was deleted while the watch was away; during our list, events change c (the list
        # has its older version), add d, and re-create e (deleted before the list's snapshot).
        listing[:] = [[_versioned(svc("a", "10.96.0.1"), "1"), _versioned(svc("c", "10.96.0.3"), "1")]]

        event = functools.partial(cast(Any, handlers.service_event), memo=memo)  # as kopf calls it

        def pages_with_events(*_: Any) -> Iterator[list[dict[str, Any]]]:
            body = _versioned(svc("c", "10.96.0.9"), "5")
            asyncio.run_coroutine_threadsafe(event(type="MODIFIED", body=body), loop)
            body = _versioned(svc("e", "10.96.0.5"), "7")
            asyncio.run_coroutine_threadsafe(event(type="ADDED", body=body), loop)
            body = _versioned(svc("d", "10.96.0.4"), "6")
            asyncio.run_coroutine_threadsafe(event(type="ADDED", body=body), loop).result()
            yield from listing

        loop = asyncio.get_running_loop()
        monkeypatch.setattr(kube, "service_pages", pages_with_events)
        await handlers.relist(ctx)
        await syncer.sync_once()
        want = {("10.96.0.1",), ("10.96.0.9",), ("10.96.0.4",), ("10.96.0.5",)}
        assert elements(fake, "cluster-ips") == want
        assert ctx.events_during_relist is None

    asyncio.run(go())


def test_kopfs_own_list_is_followed_by_ours_which_finds_deletions(monkeypatch: pytest.MonkeyPatch) -> None:
    """After "410 Gone" kopf lists again and replays only what exists: a Service deleted while its
    watch was away (e.g. across an apiserver restart) must not wait for the hourly list."""
    from kopf._cogs.clients import fetching  # noqa: PLC0415

    monkeypatch.setattr(kube, "service_pages", lambda *_: iter([[_versioned(svc("a", "10.96.0.1"), "1")]]))
    monkeypatch.setattr(kube, "endpoint_slice_pages", lambda *_: iter([]))

    async def kopfs_list(**_: Any) -> Any:
        yield [], "9"

    monkeypatch.setattr(fetching, "fetch_objs", kopfs_list)

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        syncer.changes.mark_loaded()
        for name, ip in (("a", "10.96.0.1"), ("b", "10.96.0.2")):
            syncer.changes.service_changed(f"default/{name}", _versioned(svc(name, ip), "1"))
        await syncer.sync_once()
        undo = handlers.watch_from_our_lists(ctx)
        try:
            for _ in range(2):  # two lists in a row: one list of ours is queued, not two
                fetch = cast(Any, fetching.fetch_objs)  # as kopf's watcher calls it
                async for _chunk in fetch(resource=SimpleNamespace(plural="services"), namespace=None):
                    pass
            assert sum(t.get_name() == "relist-now" for t in ctx.tasks) == 1
            await asyncio.gather(*ctx.tasks)
        finally:
            undo()
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}  # b is gone

    asyncio.run(go())


def test_lists_started_at_process_start_are_used_once_with_their_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Services list prefetched at start is read (its resourceVersion kept for kopf's
    watch); the EndpointSlice prefetch failed, so the retry lists again, on its own."""
    monkeypatch.setattr(kube, "server_version", lambda api: VERSION)
    monkeypatch.setattr(kube, "read_node", lambda api, name: None)
    own: list[str] = []

    def services(on_version: Any) -> Iterator[list[dict[str, Any]]]:
        on_version("41")
        yield [svc("a", "10.96.0.1")]

    def broken(on_version: Any) -> Iterator[list[dict[str, Any]]]:
        raise kube.ApiError(500, "Internal Server Error", "etcd leader changed")
        yield []

    def own_slices(_: Any, on_version: Any) -> Iterator[list[dict[str, Any]]]:
        own.append("slice")
        on_version("43")
        yield [k.endpoint_slice("a-1", "a", [k.endpoint("10.244.0.2")], [k.port(80, "http")])]

    def own_services(_: Any, on_version: Any) -> Iterator[list[dict[str, Any]]]:
        own.append("svc")
        on_version("42")
        yield [svc("a", "10.96.0.1")]

    monkeypatch.setattr(kube, "service_pages", own_services)
    monkeypatch.setattr(kube, "endpoint_slice_pages", own_slices)

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        ctx.prefetched = {"svc": kube.Prefetch(services), "slice": kube.Prefetch(broken)}
        await handlers.initial_load(ctx)
        assert own == ["svc", "slice"], "the retry lists both again"
        assert ctx.prefetched == {} and ctx.list_versions == {"services": "42", "endpointslices": "43"}
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}

    asyncio.run(go())


def test_prefetched_lists_alone_make_the_initial_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube, "server_version", lambda api: VERSION)
    monkeypatch.setattr(kube, "read_node", lambda api, name: None)

    def never(*_: Any) -> Iterator[list[dict[str, Any]]]:
        raise AssertionError("listed again")

    monkeypatch.setattr(kube, "service_pages", never)
    monkeypatch.setattr(kube, "endpoint_slice_pages", never)

    def services(on_version: Any) -> Iterator[list[dict[str, Any]]]:
        on_version("41")
        yield [svc("a", "10.96.0.1")]
        yield [svc("b", "10.96.0.2")]

    def slices(on_version: Any) -> Iterator[list[dict[str, Any]]]:
        on_version("44")
        yield []

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        ctx.prefetched = {"svc": kube.Prefetch(services), "slice": kube.Prefetch(slices)}
        await handlers.initial_load(ctx)
        assert ctx.list_versions == {"services": "41", "endpointslices": "44"}
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.2",)}

    asyncio.run(go())
