"""The pure parts of bench.churn_vs_kubeproxy: the rolling-Deployment stream, the percentile, the
ratios to kube-proxy and the report, and the profile's categories."""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from bench.churn_vs_kubeproxy.profile import categorize, inclusive_table, profile_table
from bench.churn_vs_kubeproxy.results import Run, metric_sum, pct, ratios, report
from bench.slicechurn.stream import ENDPOINTS, TRIGGER, initial_pods, rfc3339, stream


def _conditions(body: dict) -> dict[str, tuple[bool, bool, bool]]:  # type: ignore[type-arg]
    return {
        e["addresses"][0]: (e["conditions"]["ready"], e["conditions"]["serving"], e["conditions"]["terminating"])
        for e in body["endpoints"]
    }


def test_a_rollout_replaces_each_pod_in_three_writes() -> None:
    writes = list(itertools.islice(stream(services=5, concurrent=1, seed=1), 3 * ENDPOINTS + 1))
    first = writes[0].index
    assert all(w.index == first for w in writes[: 3 * ENDPOINTS])  # one Service rolls to the end
    assert writes[3 * ENDPOINTS].index != first  # then the next one
    old = [p.address for p in initial_pods(first)]
    # (1) a new pod, not ready
    c = _conditions(writes[0].body)
    new = next(a for a in c if a not in old)
    assert c[new] == (False, False, False) and writes[0].ready is None
    assert all(c[a] == (True, True, False) for a in old)
    # (2) it turns ready, the oldest pod turns terminating (still serving)
    c = _conditions(writes[1].body)
    assert writes[1].ready == new and c[new] == (True, True, False)
    assert c[old[0]] == (False, True, True)
    assert sum(v == (True, True, False) for v in c.values()) == ENDPOINTS
    # (3) the terminating pod is gone
    c = _conditions(writes[2].body)
    assert old[0] not in c and len(c) == ENDPOINTS and writes[2].ready is None
    # after the rollout: 10 new ready pods, none of the old ones
    c = _conditions(writes[3 * ENDPOINTS - 1].body)
    assert not set(c) & set(old) and all(v == (True, True, False) for v in c.values()) and len(c) == ENDPOINTS
    assert writes[0].body["metadata"]["annotations"][TRIGGER] == ""  # set when sent


def test_the_stream_is_the_same_for_the_same_seed_and_rolls_concurrently() -> None:
    a = [(w.index, w.ready, _conditions(w.body)) for w in itertools.islice(stream(1000, 20, 7), 500)]
    b = [(w.index, w.ready, _conditions(w.body)) for w in itertools.islice(stream(1000, 20, 7), 500)]
    c = [(w.index, w.ready) for w in itertools.islice(stream(1000, 20, 8), 500)]
    assert a == b and [x[:2] for x in a] != c
    assert len({i for i, _, _ in a[:20]}) == 20  # 20 Services at once, one write each in turn
    readies = [r for _, r, _ in a if r is not None]
    assert len(readies) == len(set(readies)) > 150  # every new pod has its own address


def test_a_service_never_rolls_twice_at_once_when_the_order_wraps() -> None:
    window: list[int] = []
    for w in itertools.islice(stream(services=4, concurrent=3, seed=2), 400):
        window = [*window[-2:], w.index]
        assert len(set(window)) == len(window) or len(window) < 3


def test_trigger_time_is_rfc3339_utc() -> None:
    text = rfc3339(1_796_212_800.25)
    assert text.endswith("Z") and text == "2026-12-02T12:00:00.250000Z"
    assert datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() == 1_796_212_800.25


def test_pct_and_metric_sum() -> None:
    assert pct([], 0.5) is None
    assert pct([3.0, 1.0, 2.0], 0.5) == 2.0
    assert pct([float(x) for x in range(1, 101)], 0.99) == 99.0
    m = {'a_count{ip_family="IPv4"}': 3.0, 'a_count{ip_family="IPv6"}': 1.0, "a_count_other": 9.0, "a_count": 2.0}
    assert metric_sum(m, "a_count") == 6.0


def test_profile_categories_by_innermost_known_frame() -> None:
    stack = (
        "<module> (nftproxy/__main__.py:1);run (asyncio/base_events.py:9);watch (kopf/_core/x.py:3);"
        "decode (json/decoder.py:337);raw_decode (json/decoder.py:353)"
    )
    assert categorize(stack) == "JSON decode"
    assert categorize("a (nftproxy/operator/syncer.py:1);b (nftproxy/compiler/render.py:2)") == "compile"
    assert categorize("a (kopf/x.py:1);b (<frozen abc>:1)") == "kopf"
    assert categorize("select (selectors.py:1)") == "other"
    rows = profile_table(f"{stack} 3\na (nftproxy/nft/netlink.py:1) 1\nnot a line\n")
    assert [(k, n) for k, n, _ in rows] == [("JSON decode", 3), ("netlink / kernel", 1)]
    assert abs(sum(s for _, _, s in rows) - 1.0) < 1e-9


def test_metric_sum_of_one_family() -> None:
    m = {'s_count{ip_family="IPv4"}': 5.0, 's_count{ip_family="IPv6"}': 5.0, "t": 1.0}
    assert metric_sum(m, "s_count", "IPv4") == 5.0 and metric_sum(m, "s_count") == 10.0


def test_inclusive_shares_count_a_sample_in_each_layer_it_passes() -> None:
    text = (
        "w (kopf/_core/reactor/watching.py:1);h (nftproxy/operator/handlers.py:9);p (nftproxy/model/parse.py:3) 2\n"
        "s (nftproxy/operator/syncer.py:1);c (nftproxy/compiler/render.py:1) 1\n"
        "select (selectors.py:468) 1\n"
    )
    shares = dict(inclusive_table(text))
    assert shares["kopf (its watch stream, queues, workers, and our handlers below it)"] == 0.5
    assert shares["parse (nftproxy/model)"] == 0.5 and shares["  compile (nftproxy/compiler)"] == 0.25
    assert shares["epoll (the event loop waiting or polling)"] == 0.25


def _run(proxy: str, rate: float, cpu: float, total_bytes: int, rss: tuple[float, float, float]) -> Run:
    r = Run(proxy, rate, seconds=60.0, writes=int(rate * 60), user_s=cpu * 0.75, system_s=cpu * 0.25)
    r.rss_start, r.rss_end, r.rss_peak = rss
    r.bytes_start, r.bytes_down, r.bytes_total = total_bytes // 2, total_bytes // 2, total_bytes
    return r


def test_ratios_compare_each_proxy_with_kube_proxy_at_its_rate_bytes_from_the_start() -> None:
    runs = [
        _run("kube-proxy", 20, 4.0, 1000, (80, 80, 82)),
        _run("nftproxy", 20, 1.0, 1500, (40, 42, 41)),
        _run("kube-proxy", 100, 8.0, 4000, (80, 80, 80)),
        _run("nftproxy", 100, 6.0, 2000, (40, 40, 60)),
        _run("nftproxy@0s", 100, 2.0, 4000, (40, 40, 40)),
    ]
    x = ratios(runs)
    assert set(x) == {(20, "nftproxy"), (100, "nftproxy"), (100, "nftproxy@0s")}
    assert (x[20, "nftproxy"].cpu, x[20, "nftproxy"].bytes, x[20, "nftproxy"].rss) == (0.25, 1.5, 0.5)  # RSS: peaks
    assert (x[100, "nftproxy"].cpu, x[100, "nftproxy"].bytes, x[100, "nftproxy"].rss) == (0.75, 0.5, 0.75)
    assert ratios([_run("nftproxy", 20, 1.0, 1, (1, 1, 1))]) == {}  # no kube-proxy run: no ratio


def test_the_report_gives_the_ratios_and_the_goals(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run("kube-proxy", 20, 4.0, 1000, (80, 80, 82)), _run("nftproxy", 20, 1.0, 1500, (40, 42, 41))]
    report(runs, 1000, "v1.37.2")
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 20 (20.0) | nftproxy |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5] == "0.25x" and cells[7] == "0.50x" and cells[11] == "0.00 (0.00)" and cells[12] == "1.50x"
    goals = next(line for line in out.splitlines() if "goals, nftproxy at 20/s" in line)
    assert "CPU ≤ 0.5x kube-proxy's 0.25x met" in goals and "bytes ≤ 1.0x 1.50x NOT met" in goals
    assert "RSS ≤ 0.75x 0.50x met" in goals and "RSS flat within ±5 % +5.0 % met" in goals
