"""The pure parts of bench.controlplane_vs_kubeproxy: the per-proxy figures, the ratios to
kube-proxy, the apiserver's CPU above the writes alone, and the report."""

from __future__ import annotations

import pytest

from bench.controlplane_vs_kubeproxy.results import Run, per_proxy_above_writes, ratios, report


def _run(kind: str, rate: float, apiserver_s: float, churn_bytes: list[int], start_s: float = 0.0) -> Run:
    r = Run(kind, rate, len(churn_bytes), seconds=30.0, writes=int(rate * 30), apiserver_s=apiserver_s)
    r.churn_bytes, r.start_bytes, r.start_apiserver_s = churn_bytes, [b * 2 for b in churn_bytes], start_s
    r.idle_seconds, r.idle_apiserver_s = 10.0, 0.5
    return r


def test_bytes_are_per_proxy_per_minute_of_churn() -> None:
    r = _run("nftproxy", 20, 1.0, [1000, 3000])
    assert r.bytes_per_min_per_proxy() == pytest.approx(4000.0)  # 4000 B in 30 s over 2 proxies
    assert r.start_bytes_per_proxy() == 4000.0
    assert r.idle_per_min() == 3.0


def test_ratios_and_the_apiserver_cpu_above_the_writes_alone_per_proxy() -> None:
    runs = [
        _run("none", 20, 1.0, []),
        _run("kube-proxy", 20, 3.0, [1000, 1000], start_s=4.0),
        _run("nftproxy", 20, 2.0, [1500, 1500], start_s=2.0),
        _run("nftproxy", 100, 2.0, [1, 1]),  # no kube-proxy run at 100/s: no ratio
    ]
    x = ratios(runs)
    assert set(x) == {(20, "nftproxy")}
    assert (x[20, "nftproxy"].apiserver_churn, x[20, "nftproxy"].apiserver_start) == pytest.approx((2 / 3, 0.5))
    assert (x[20, "nftproxy"].bytes_churn, x[20, "nftproxy"].bytes_start) == pytest.approx((1.5, 1.5))
    above = per_proxy_above_writes(runs)
    assert above == pytest.approx({(20, "kube-proxy"): 2.0, (20, "nftproxy"): 1.0})  # (6 - 2) / 2 and (4 - 2) / 2 s/min


def test_the_report_gives_each_kind_and_the_goals(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run("none", 20, 1.0, []), _run("kube-proxy", 20, 3.0, [1000, 1000], 4.0),
            _run("nftproxy", 20, 2.0, [1500, 1500], 2.0)]  # fmt: skip
    report(runs, 1000, "v1.37.2")
    out = capsys.readouterr().out
    rows = {line.split("|")[2].strip(): line for line in out.splitlines() if line.startswith("| 20 (20.0) |")}
    assert set(rows) == {"none", "kube-proxy", "nftproxy"}
    cells = [c.strip() for c in rows["nftproxy"].strip("|").split("|")]
    assert cells[2:5] == ["4.00", "0.67x", "1.000"] and cells[9:11] == ["3.0", "1.50x"]
    goals = next(line for line in out.splitlines() if "goals, nftproxy at 20/s" in line)
    assert "the apiserver's CPU over the churn 0.67x met" in goals
    assert "bytes sent per proxy over the churn 1.50x NOT met" in goals
