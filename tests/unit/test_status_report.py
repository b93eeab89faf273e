"""ProxyStatus writes (operator/status.py ``held_until``): what changes with every sync alone (a
heartbeat) is written once a REPORT_PERIOD, as the kubelet reports an unchanged Node status;
anything else at once (within --status-period, the writer's rate limit)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from nftproxy.operator.status import REPORT_PERIOD, held_until

WRITTEN: dict[str, Any] = {
    "services": 10,
    "endpoints": 100,
    "lastSyncTime": "2026-01-01T00:00:00Z",
    "lastSyncDuration": "3.0ms",
    "lastSyncKind": "partial",
    "rulesetChecksum": "abc",
    "syncs": 7,
    "failures": 0,
    "lastError": None,
    "skipped": [],
    "conditions": [{"type": "InSync", "status": "True"}],
}


def test_only_the_heartbeat_changed_waits_for_the_report_period() -> None:
    later = {**WRITTEN, "lastSyncTime": "2026-01-01T00:00:01Z", "syncs": 8, "rulesetChecksum": "def"}
    assert held_until(WRITTEN, later, last_report=100.0) == 100.0 + REPORT_PERIOD


def test_anything_else_is_written_at_once() -> None:
    for change in (
        {"endpoints": 99},
        {"failures": 1, "lastError": "the kernel refused"},
        {"skipped": [{"kind": "Service", "namespace": "a", "name": "b", "reason": "r"}]},
        {"conditions": [{"type": "InSync", "status": "False"}]},
    ):
        assert held_until(WRITTEN, {**WRITTEN, "syncs": 8, **change}, last_report=100.0) is None, change


def test_the_first_write_and_a_heartbeat_fields_first_value_are_not_held() -> None:
    assert held_until(None, WRITTEN, last_report=0.0) is None
    assert held_until({**WRITTEN, "rulesetChecksum": None}, WRITTEN, last_report=100.0) is None
    assert held_until(WRITTEN, WRITTEN, last_report=100.0) is None  # nothing to write


def test_the_writer_writes_a_held_heartbeat_when_its_period_is_over_with_no_other_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One write, then a heartbeat-only change held (no write), then written once REPORT_PERIOD
    is over though nothing woke the writer again; the later writes as one request (``exists``)."""
    from nftproxy.operator import kube, status  # noqa: PLC0415

    writes: list[tuple[dict[str, Any], bool]] = []
    current = dict(WRITTEN)
    monkeypatch.setattr(status, "REPORT_PERIOD", 0.5)
    monkeypatch.setattr(status, "render_status", lambda _: dict(current))
    monkeypatch.setattr(kube, "write_proxy_status", lambda _api, _n, _uid, st, exists: writes.append((st, exists)))

    async def scenario() -> None:
        syncer = SimpleNamespace(changed=asyncio.Event(), status=SimpleNamespace(skipped=[]))
        writer = status.StatusWriter(cast(Any, None), cast(Any, syncer), "node", period=0.05)
        task = asyncio.create_task(writer.run())
        syncer.changed.set()
        await asyncio.sleep(0.2)
        assert writes == [(WRITTEN, False)]
        current.update(syncs=8, lastSyncTime="2026-01-01T00:00:01Z")
        syncer.changed.set()
        await asyncio.sleep(0.2)
        assert len(writes) == 1  # held
        await asyncio.sleep(0.5)
        assert writes[1:] == [({**WRITTEN, "syncs": 8, "lastSyncTime": "2026-01-01T00:00:01Z"}, True)]
        task.cancel()

    asyncio.run(scenario())
