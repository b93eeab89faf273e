"""Short variants of bench/churn.py: churn, crashes and outages against a real control plane, with
real connections to stable Services all along, ending with the convergence checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.k8s.controlplane import ControlPlane
from testkit.scenarios.churn import Plan, Result, run

pytestmark = [pytest.mark.resilience, pytest.mark.k8s, pytest.mark.netns]


def report(res: Result) -> str:
    return json.dumps(res.summary(), indent=1)


def test_churn_loses_no_connection_and_no_update(own_control_plane: ControlPlane, tmp_path: Path) -> None:
    res = run(own_control_plane, Plan(services=300, duration=30, rate=50, min_sync_period="0"), tmp_path)
    print(report(res))
    assert res.attempts > 300, report(res)
    assert res.failed == 0, report(res)
    assert res.write_failures == 0 and res.writes > 1000, report(res)
    assert res.sync_failures == 0, report(res)
    assert res.latencies, report(res)
    assert res.differences == [] and res.converge_seconds is not None, report(res)
    assert res.rss_growth <= 0.05, report(res)


def test_sigkill_during_churn_loses_no_connection_and_no_update(
    own_control_plane: ControlPlane, tmp_path: Path
) -> None:
    plan = Plan(services=300, duration=40, rate=50, crash_every=12, min_sync_period="0")
    res = run(own_control_plane, plan, tmp_path)
    print(report(res))
    assert len(res.restarts) >= 2, report(res)
    assert res.failed == 0, report(res)
    assert res.differences == [] and res.converge_seconds is not None, report(res)


def test_apiserver_and_etcd_outages_keep_rules_and_converge(own_control_plane: ControlPlane, tmp_path: Path) -> None:
    plan = Plan(
        services=300, duration=50, rate=50, outages=(("apiserver", 5, 10), ("etcd", 28, 10)), min_sync_period="0"
    )
    res = run(own_control_plane, plan, tmp_path)
    print(report(res))
    assert res.failed == 0, report(res)
    for o in res.outages:
        assert o.after_seconds is not None, f"{o.what}: a write after the outage never reached the kernel"
        assert o.in_sync_after.startswith("True"), report(res)
    assert res.differences == [] and res.converge_seconds is not None, report(res)
