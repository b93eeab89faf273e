"""kube-proxy's health rule and answers (pkg/proxy/healthcheck, v1.37.2) with plain numbers, as
its own healthcheck_test.go drives ProxyHealthServer with a fake clock: the health timeout is
10 s here, as there; instants are seconds."""

from __future__ import annotations

import json

import pytest

from nftproxy.operator.proxy_health import (
    FAMILIES,
    WEIGHT_HEADER,
    ProxyHealth,
    go_time,
    proxy_answer,
    service_answer,
)

TIMEOUT = 10.0
EPOCH_NS = 1_800_000_000 * 10**9  # the wall clock at instant 0 (2027-01-15T08:00:00Z)


def wall(t: float) -> str:
    return go_time(EPOCH_NS + round(t * 1e9))


def answer(ph: ProxyHealth, now: float, eligible: bool | None = True) -> tuple[int, dict[str, object]]:
    status, headers, body = proxy_answer(ph.health(now), EPOCH_NS + round(now * 1e9), eligible)
    assert headers == {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}
    return status, json.loads(body)


def test_healthy_before_the_sync_loop_starts_even_with_an_update_queued() -> None:
    """kube-proxy's Health() only judges proxiers that have called Updated once (its SyncLoop
    does, first thing): before that, healthy, and no per-family status."""
    ph = ProxyHealth(TIMEOUT)
    ph.queued_update(0.0)
    assert ph.health(100.0).healthy
    status, body = answer(ph, 100.0)
    assert status == 200
    assert body == {"lastUpdated": wall(100), "currentTime": wall(100), "nodeEligible": True, "healthy": True}


def test_healthy_while_nothing_is_queued_however_old_the_last_sync() -> None:
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    assert ph.health(25.0).healthy  # kube-proxy: "as long as no further updates are queued"
    assert ph.health(10_000.0).healthy


def test_a_queued_update_is_late_at_the_timeout_not_before() -> None:
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    ph.queued_update(25.0)
    assert ph.health(34.999).healthy
    assert not ph.health(35.0).healthy  # currentTime - oldest queued >= healthTimeout
    assert not ph.health(60.0).healthy


def test_the_oldest_queued_update_counts_and_a_successful_sync_clears_it() -> None:
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    ph.queued_update(1.0)
    ph.queued_update(9.0)  # a later change does not restart the clock
    assert not ph.health(11.0).healthy
    ph.updated(12.0)
    assert ph.health(12.0).healthy
    ph.queued_update(13.0)
    assert ph.health(22.9).healthy and not ph.health(23.0).healthy


def test_the_healthz_answers_of_kube_proxys_test_proxy_health_updater() -> None:
    """testProxyHealthUpdater's steps (both families update together in nftproxy: one sync)."""
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    fams = {f: {"lastUpdated": wall(0), "healthy": True} for f in FAMILIES}
    ok = {"lastUpdated": wall(0), "currentTime": wall(0), "nodeEligible": True, "healthy": True, "status": fams}
    assert answer(ph, 0.0) == (200, ok)
    # 200 as long as no further updates are queued; lastUpdated is the current time while healthy
    assert answer(ph, 25.0) == (200, {**ok, "lastUpdated": wall(25), "currentTime": wall(25)})
    # an update queued and not processed within the timeout: 503, lastUpdated the last update
    ph.queued_update(25.0)
    late = {f: {"lastUpdated": wall(0), "healthy": False} for f in FAMILIES}
    assert answer(ph, 50.0) == (
        503,
        {"lastUpdated": wall(0), "currentTime": wall(50), "nodeEligible": True, "healthy": False, "status": late},
    )
    # processed: 200 again
    ph.updated(50.0)
    fams = {f: {"lastUpdated": wall(50), "healthy": True} for f in FAMILIES}
    assert answer(ph, 55.0) == (
        200,
        {"lastUpdated": wall(55), "currentTime": wall(55), "nodeEligible": True, "healthy": True, "status": fams},
    )


def test_healthz_is_503_for_a_node_not_eligible_and_livez_does_not_look() -> None:
    """TestHealthzServer / TestLivezServer: a Node being deleted or tainted
    ToBeDeletedByClusterAutoscaler fails /healthz (with healthy still true in the body, and
    lastUpdated the real one), not /livez (no nodeEligible field at all)."""
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    status, body = answer(ph, 5.0, eligible=False)
    assert status == 503 and body["healthy"] is True and body["nodeEligible"] is False
    assert body["lastUpdated"] == wall(0) and body["currentTime"] == wall(5)
    status, body = answer(ph, 5.0, eligible=None)
    assert status == 200 and "nodeEligible" not in body and body["lastUpdated"] == wall(5)
    ph.queued_update(5.0)
    status, body = answer(ph, 15.0, eligible=None)
    assert status == 503 and body["healthy"] is False


def test_healthz_json_is_compact_in_go_field_order() -> None:
    ph = ProxyHealth(TIMEOUT)
    ph.updated(0.0)
    _, _, body = proxy_answer(ph.health(1.5), EPOCH_NS + 1_500_000_000, True)
    assert body.decode() == (
        '{"lastUpdated":"2027-01-15T08:00:01.5Z","currentTime":"2027-01-15T08:00:01.5Z","nodeEligible":true,'
        '"healthy":true,"status":{"IPv4":{"lastUpdated":"2027-01-15T08:00:00Z","healthy":true},'
        '"IPv6":{"lastUpdated":"2027-01-15T08:00:00Z","healthy":true}}}'
    )


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, "0001-01-01T00:00:00Z"),
        (EPOCH_NS, "2027-01-15T08:00:00Z"),
        (EPOCH_NS + 120_000_000, "2027-01-15T08:00:00.12Z"),
        (EPOCH_NS + 1, "2027-01-15T08:00:00.000000001Z"),
    ],
)
def test_times_are_rfc3339_with_nanoseconds_as_go_marshals_them(ns: int | None, text: str) -> None:
    assert go_time(ns) == text


def test_a_health_check_port_answers_kube_proxys_bytes_and_headers() -> None:
    status, headers, body = service_answer("shop", "web", 3, True)
    assert status == 200
    assert headers == {
        "Content-Type": "application/json",
        "X-Content-Type-Options": "nosniff",
        WEIGHT_HEADER: "3",
    }
    assert body == (
        b'{\n\t"service": {\n\t\t"namespace": "shop",\n\t\t"name": "web"\n\t},\n'
        b'\t"localEndpoints": 3,\n\t"serviceProxyHealthy": true\n}'
    )
    assert json.loads(body) == {
        "service": {"namespace": "shop", "name": "web"},
        "localEndpoints": 3,
        "serviceProxyHealthy": True,
    }


@pytest.mark.parametrize(
    ("endpoints", "proxy_healthy", "status"),
    [(2, True, 200), (0, True, 503), (2, False, 503), (0, False, 503)],
)
def test_a_health_check_port_is_503_without_a_local_endpoint_or_while_the_proxy_is_unhealthy(
    endpoints: int, proxy_healthy: bool, status: int
) -> None:
    got, headers, body = service_answer("shop", "web", endpoints, proxy_healthy)
    assert got == status
    assert headers[WEIGHT_HEADER] == str(endpoints)  # the count, whatever the status
    assert json.loads(body)["serviceProxyHealthy"] is proxy_healthy
