"""kopf's per-object records: none kept for our on.event handlers (issue 13: RSS grew by ~1 KB per
object changed once since the start, up to ~20 MB at 10k Services, never shrinking back)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing, posting
from kopf._core.intents import registries
from kopf._core.reactor import inventory, processing

from nftproxy.operator import handlers, main
from nftproxy.operator.kubeproxy_watch import KubeProxyWatch
from nftproxy.operator.status import StatusWriter
from nftproxy.operator.syncer import Syncer
from testkit.k8s import objects as k
from tests.support.syncer import make, settings

CIDRS = references.Resource(group="networking.k8s.io", version="v1", plural="servicecidrs", namespaced=False)


def _objects(n: int) -> list[tuple[references.Resource, dict[str, Any]]]:
    """ServiceCIDRs (kopf watches them and our Node; Services and EndpointSlices are ours: reflector.py)."""
    out: list[tuple[references.Resource, dict[str, Any]]] = []
    for i in range(n):
        obj = k.service_cidr(f"c{i}", f"10.{i // 250}.{i % 250}.0/24")
        obj["metadata"].update(uid=f"uid-{i}", resourceVersion="1")
        out.append((CIDRS, obj))
    return out


async def _events(
    memories: inventory.ResourceMemories, objects: list[tuple[references.Resource, dict[str, Any]]], syncer: Any
) -> None:
    """Each object's MODIFIED event through kopf's own processing and our registered handlers."""
    ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
    memo = handlers.memo_for(ctx)
    op_settings = kopf.OperatorSettings()
    op_settings.persistence.diffbase_storage = handlers.NoDiffBase()
    for resource, obj in objects:
        await processing.process_resource_event(
            lifecycle=lifecycles.get_default_lifecycle(),
            indexers=indexing.OperatorIndexers(),
            registry=registries.get_default_registry(),
            settings=op_settings,
            memories=memories,
            memobase=cast(Any, memo),
            resource=resource,
            raw_event=cast(Any, {"type": "MODIFIED", "object": obj}),
            event_queue=asyncio.Queue[posting.K8sEvent](),
        )


@pytest.mark.parametrize("kind", ["ours", "kopf's"])
def test_no_record_is_kept_per_object(kind: str) -> None:
    """With kopf's own memories, one record stays per object that had an event (the test can
    tell); with ours, none, and the handlers still get every event."""
    objects = _objects(400)

    async def go() -> tuple[int, int]:
        syncer, _ = make()
        memories = handlers.NoMemories() if kind == "ours" else inventory.ResourceMemories()
        await _events(memories, objects, syncer)
        return len(list(memories.iter_all_memories())), len(syncer.changes.pending)

    kept, pending = asyncio.run(go())
    assert pending == len(objects)  # every event reached the syncer
    assert kept == (0 if kind == "ours" else len(objects))


def test_the_operator_runs_with_our_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        seen.update(kwargs)

    async def no_watch(*_: Any) -> None:
        return None

    monkeypatch.setattr(kopf, "operator", operator)
    monkeypatch.setattr(KubeProxyWatch, "run", no_watch)
    monkeypatch.setattr(StatusWriter, "run", no_watch)
    monkeypatch.setattr(Syncer, "run", no_watch)
    _, fake = make()
    asyncio.run(main._main(settings(), cast(Any, fake), api=SimpleNamespace(), prefetched={}))
    assert isinstance(seen["memories"], handlers.NoMemories)
