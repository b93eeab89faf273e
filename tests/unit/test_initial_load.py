"""The initial list: parsed page by page, retried from scratch, never leaving behind an object
that only a failed attempt saw."""

from __future__ import annotations

import asyncio
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


def test_lists_started_at_process_start_are_used_once_with_their_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Services list prefetched at start is read (its resourceVersion kept for our
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

    def own_slices(_: Any, on_version: Any, *__: Any) -> Iterator[list[dict[str, Any]]]:
        own.append("slice")
        on_version("43")
        yield [k.endpoint_slice("a-1", "a", [k.endpoint("10.244.0.2")], [k.port(80, "http")])]

    def own_services(_: Any, on_version: Any, *__: Any) -> Iterator[list[dict[str, Any]]]:
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
