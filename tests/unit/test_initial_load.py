"""The initial list: parsed page by page, retried from scratch, never leaving behind an object
that only a failed attempt saw (kopf's replay would not delete it later)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from nftproxy.operator import handlers, kube
from tests import k8sobjects as k
from tests.unit.test_syncer import elements, make, svc


def test_a_retried_list_forgets_what_only_the_failed_attempt_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def service_pages(_: Any) -> Iterator[list[dict[str, Any]]]:
        attempts.append(1)
        if len(attempts) == 1:
            yield [svc("a", "10.96.0.1"), svc("b", "10.96.0.2")]
            raise ApiException(status=500, reason="etcd leader changed")
        yield [svc("a", "10.96.0.1")]  # b was deleted meanwhile
        yield [svc("c", "10.96.0.3")]

    def slice_pages(_: Any) -> Iterator[list[dict[str, Any]]]:
        yield [k.endpoint_slice("a-1", "a", [k.endpoint("10.244.0.2")], [k.port(80, "http")])]

    monkeypatch.setattr(kube, "service_pages", service_pages)
    monkeypatch.setattr(kube, "endpoint_slice_pages", slice_pages)
    monkeypatch.setattr(kube, "read_node", lambda api, name: None)

    async def go() -> None:
        syncer, fake = make()
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        await handlers.initial_load(ctx)
        assert len(attempts) == 2 and syncer.loaded.is_set()
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.3",)}
        assert syncer.status.services == 2

    asyncio.run(go())
