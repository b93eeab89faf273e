"""Our Service and EndpointSlice watches (operator/reflector.py) against a scripted apiserver:
a watch's events reach the change tracker in order and in batches; "410 Gone" lists again, and
what the new list lacks is deleted. (Against a real apiserver: tests/k8s/test_lean_watch.py.)"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nftproxy.operator import handlers, kube, wire
from nftproxy.operator.reflector import SERVICES, Reflector
from testkit.k8s import objects as k
from tests.support import protobuf as pb
from tests.support.syncer import elements, make, svc

PROXY, HEADLESS = "service.kubernetes.io/service-proxy-name", "service.kubernetes.io/headless"


def _versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def _msg(name: str, ip: str, version: str) -> Any:
    return pb.message(wire.SERVICES, _versioned(k.service(name, [ip], [k.port(80)]), version))


class ScriptedApi:
    """Each watch call yields the next script's frames (then ends, as at timeoutSeconds); lists
    come from ``listing``. Records the queries."""

    def __init__(self, watches: list[list[bytes]], listing: list[list[dict[str, Any]]], version: str) -> None:
        self.watches = watches
        self.listing = listing
        self.version = version
        self.queries: list[dict[str, Any]] = []
        self.lists = 0
        self.done = threading.Event()

    def watch(self, path: str, query: dict[str, Any], timeout: float, protobuf: bool = False) -> Iterator[bytes]:
        assert protobuf and path == kube.SERVICES
        self.queries.append(query)
        if not self.watches:
            self.done.set()
            threading.Event().wait(60)  # a quiet watch
            return
        yield from wire.frames(io.BytesIO(b"".join(self.watches.pop(0))))  # as Client.watch

    def pages(self, *_: Any, on_version: Any, **__: Any) -> Iterator[list[dict[str, Any]]]:
        self.lists += 1
        on_version(self.version)
        yield from self.listing


async def _run(api: ScriptedApi, held: dict[str, str]) -> tuple[Any, Any, list[int]]:
    syncer, fake = make()
    ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=api)
    for name, ip in held.items():
        syncer.changes.service_changed(f"default/{name}", _versioned(svc(name, ip), "1"))
    syncer.changes.mark_loaded()
    await syncer.sync_once()
    batches: list[int] = []
    go = handlers.deliver(ctx, SERVICES)

    def deliver(batch: list[Any]) -> None:
        batches.append(len(batch))
        go(batch)

    options = kube.service_options(None)
    reflector = Reflector(cast(Any, api), SERVICES, options, deliver, asyncio.get_running_loop())
    reflector.start("1")
    while not api.done.is_set():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    reflector.stop()
    await syncer.sync_once()
    return fake, reflector, batches


def test_a_watch_410_lists_again_and_deletes_what_the_new_list_lacks() -> None:
    """b was deleted while the watch was away: the apiserver answers 410; the new list has a and
    c (c changed), not b; the next watch starts at the new list's version."""
    watches = [[pb.watch_frame("MODIFIED", _msg("a", "10.96.0.1", "2")), pb.gone_frame()]]
    listing = [[_versioned(svc("a", "10.96.0.1"), "2")], [_versioned(svc("c", "10.96.0.9"), "8")]]
    api = ScriptedApi(watches, listing, version="9")
    fake, _, _ = asyncio.run(_run(api, {"a": "10.96.0.1", "b": "10.96.0.2", "c": "10.96.0.3"}))
    assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.9",)}
    assert api.lists == 1
    assert [q["resourceVersion"] for q in api.queries] == ["1", "9"]
    assert api.queries[0]["allowWatchBookmarks"] == "true" and api.queries[0]["timeoutSeconds"] == 300
    assert api.queries[0]["labelSelector"] == f"!{PROXY}" and api.queries[0]["fieldSelector"] == "spec.clusterIP!=None"


def test_a_watch_goes_on_from_the_last_version_it_saw_bookmarks_included() -> None:
    watches = [
        [pb.watch_frame("ADDED", _msg("d", "10.96.0.4", "5")), pb.watch_frame("BOOKMARK", _msg("", "", "7"))],
        [pb.watch_frame("DELETED", _msg("a", "10.96.0.1", "8"))],
    ]
    api = ScriptedApi(watches, [], version="0")
    fake, _, _ = asyncio.run(_run(api, {"a": "10.96.0.1"}))
    assert [q["resourceVersion"] for q in api.queries] == ["1", "7", "8"]
    assert api.lists == 0
    assert elements(fake, "cluster-ips") == {("10.96.0.4",)}


def test_the_events_of_a_busy_moment_reach_the_loop_in_one_batch() -> None:
    frames = [pb.watch_frame("ADDED", _msg(f"s{i}", f"10.96.1.{i}", str(10 + i))) for i in range(200)]
    api = ScriptedApi([frames], [], version="0")
    fake, _, batches = asyncio.run(_run(api, {}))
    assert sum(batches) == 200 and len(batches) < 20, batches
    assert len(elements(fake, "cluster-ips")) == 200


def test_the_selectors_are_kube_proxys_and_follow_the_service_proxy_name() -> None:
    """cmd/kube-proxy/app/server.go (v1.37.2): Services without the proxy-name label and not
    headless; EndpointSlices without the headless label."""
    assert kube.service_options("nftproxy") == {
        "labelSelector": f"{PROXY}=nftproxy",
        "fieldSelector": "spec.clusterIP!=None",
    }
    assert {"labelSelector": f"!{HEADLESS}"} == kube.SLICE_OPTIONS


@pytest.mark.parametrize("code", [500, 403])
def test_a_failed_watch_is_retried_from_where_it_was(code: int) -> None:
    import nftproxy.operator.k8spb.meta_v1_pb2 as meta  # noqa: PLC0415

    error = pb.watch_frame("ERROR", meta.Status(code=code, reason="x", message="boom"))
    watches = [[pb.watch_frame("ADDED", _msg("d", "10.96.0.4", "5")), error]]
    api = ScriptedApi(watches, [], version="0")
    fake, _, _ = asyncio.run(_run(api, {}))
    assert [q["resourceVersion"] for q in api.queries] == ["1", "5"]
    assert api.lists == 0 and elements(fake, "cluster-ips") == {("10.96.0.4",)}


class TricklingApi:
    """One watch whose events come one by one, ``gap`` seconds apart (a steady churn)."""

    def __init__(self, frames: list[bytes], gap: float) -> None:
        self.frames, self.gap = frames, gap
        self.done = threading.Event()

    def watch(self, *_: Any, **__: Any) -> Iterator[bytes]:
        for frame in wire.frames(io.BytesIO(b"".join(self.frames))):
            threading.Event().wait(self.gap)
            yield frame
        self.done.set()
        threading.Event().wait(60)  # a quiet watch


async def _trickle(hold: float) -> list[tuple[float, int]]:
    """10 events 20 ms apart, held until ``hold`` seconds after the start: (when, size) of each
    batch the loop got."""
    frames = [pb.watch_frame("ADDED", _msg(f"s{i}", f"10.96.1.{i}", str(10 + i))) for i in range(10)]
    api = TricklingApi(frames, gap=0.02)
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    got: list[tuple[float, int]] = []
    reflector = Reflector(
        cast(Any, api), SERVICES, {}, lambda b: got.append((time.monotonic() - start, len(b))), loop,
        not_before=lambda: start + hold,
    )  # fmt: skip
    reflector.start("1")
    while not api.done.is_set() or sum(n for _, n in got) < 10:
        await asyncio.sleep(0.01)
        assert time.monotonic() - start < 10
    reflector.stop()
    return got


def test_within_the_min_sync_period_a_watch_holds_its_events_for_one_wake_up_when_it_ends() -> None:
    """Schedule.earliest: a sync could not take them sooner, so the loop wakes once for all."""
    got = asyncio.run(_trickle(hold=0.6))
    assert len(got) == 1 and got[0][1] == 10, got
    assert 0.55 <= got[0][0] < 2, got


def test_with_no_sync_in_the_way_each_event_goes_to_the_loop_at_once() -> None:
    got = asyncio.run(_trickle(hold=-1))
    assert len(got) >= 5 and got[0][0] < 0.3, got
