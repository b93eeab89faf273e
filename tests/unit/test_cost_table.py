"""README.md's cost table is what bench.cost_table makes of the results committed in docs/results/,
and bench.cost_table reads those results right (the latest run of each size, nftproxy against
kube-proxy, ratios, the commands)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import cost_table


def test_the_readme_cost_table_is_made_from_the_committed_results() -> None:
    results = cost_table.load()
    assert {r["bench"] for r in results} == set(cost_table.BENCHES)
    assert cost_table.in_readme(cost_table.README.read_text()) == cost_table.table(results)


def _churn(services: int, started: str, nft_cpu: float, argv: list[str] | None = None) -> dict[str, Any]:
    figures = []
    for rate in (20.0, 100.0):
        for proxy, cpu, mb, rss, first in (
            ("nftproxy", nft_cpu, 3e6, 40.0, 0.5),
            ("kube-proxy", 2.0, 1.5e6, 80.0, 1.5),
        ):
            labels = {"services": services, "rate": rate, "proxy": proxy, "kube_proxy": "v1.37.2"}
            figures += [
                {"what": "CPU user per minute", "value": cpu * 0.75, "unit": "s", **labels},
                {"what": "CPU system per minute", "value": cpu * 0.25, "unit": "s", **labels},
                {"what": "bytes from apiserver, start to churn end", "value": mb * rate / 20, "unit": "B", **labels},
                {"what": "RSS peak", "value": rss + rate / 10, "unit": "MB", **labels},
                {"what": "RSS change over the churn", "value": rate / 50 - 3, "unit": "%", **labels},
                {"what": "first sync", "value": first + rate / 100, "unit": "s", **labels},
            ]
    return {"bench": "churn_vs_kubeproxy", "argv": argv or ["--services", str(services)], "started": started,
            "exit": 0, "figures": figures}  # fmt: skip


def _plane(services: int) -> dict[str, Any]:
    figures = []
    for rate in (20.0, 100.0):
        for kind, cpu, b in (("none", 1.0, None), ("nftproxy", 3.0, 6e6), ("kube-proxy", 4.0, 3e6)):
            labels = {"services": services, "rate": rate, "kind": kind, "proxies": 0 if b is None else 10}
            figures.append(
                {"what": "apiserver CPU per minute of churn", "value": cpu * rate / 20, "unit": "s", **labels}
            )
            if b is not None:
                above = "apiserver CPU per minute of churn above the writes alone, per proxy"
                figures.append({"what": above, "value": (cpu - 1.0) * rate / 200, "unit": "s", **labels})
                figures.append({"what": "bytes per proxy per minute of churn", "value": b, "unit": "B", **labels})
    argv = ["--proxies", "10", "--netns-prefix", "cb", "--forward-port=46300", "--duration", "60"]
    return {"bench": "controlplane_vs_kubeproxy", "argv": argv, "started": "2026-01-01T00:00:00", "exit": 0,
            "figures": figures}  # fmt: skip


def test_each_size_is_a_column_of_its_latest_run_nftproxy_against_kube_proxy() -> None:
    old = _churn(1000, "2026-01-01T00:00:00", 9.0)
    new = _churn(1000, "2026-01-02T00:00:00", 1.0, ["--services", "1000", "--netns-prefix", "cb", "--duration", "90"])
    big = _churn(10000, "2026-01-01T00:00:00", 1.5)
    lines = cost_table.table([old, new, big, _plane(1000)]).replace(cost_table.TIMES, "x").splitlines()
    assert lines[0] == "| per node: nftproxy / kube-proxy v1.37.2 (ratio) | 1,000 Services | 10,000 Services |"
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("|").split(" | ")[1:] for line in lines[2:7]}
    assert [c.strip() for c in rows["CPU under churn, per minute, at 20 / 100 writes/s"]] == [
        "1.00 / 2.00 s (0.50x); 1.00 / 2.00 s (0.50x)",
        "1.50 / 2.00 s (0.75x); 1.50 / 2.00 s (0.75x)",
    ]
    bytes_row = rows["Bytes from the API server, from the start through the churn, at 20 / 100 writes/s"]
    assert bytes_row[0].strip() == "3.0 / 1.5 MB (2.00x); 15.0 / 7.5 MB (2.00x)"
    assert rows["Memory (RSS), peak"][0].strip() == "50 / 90 MB (0.56x); nftproxy's -2.6 % over the churn"
    assert rows["First sync"][0].strip() == "1.10 / 2.10 s (0.52x)"  # the median of the runs
    plane = rows[
        "Control plane, 10 nodes at 20 writes/s: kube-apiserver CPU per minute (the writes and the 10 proxies); "
        "bytes it sends each node per minute"
    ]
    assert [c.strip() for c in plane] == ["3.00 / 4.00 s (0.75x); 6.0 / 3.0 MB (2.00x)", cost_table.MISSING]
    assert lines[-1] == (
        "| Commands | `python -m bench churn_vs_kubeproxy --services 1000 --duration 90`, "
        "`python -m bench controlplane_vs_kubeproxy --proxies 10 --duration 60` | "
        "`python -m bench churn_vs_kubeproxy --services 10000` |"
    )


def test_a_run_that_failed_or_of_another_benchmark_is_not_read(tmp_path: Path) -> None:
    good = _churn(1000, "2026-01-01T00:00:00", 1.0)
    failed = _churn(1000, "2026-01-03T00:00:00", 5.0) | {"exit": 1}
    other = {"bench": "vs_kubeproxy", "argv": [], "started": "2026-01-04T00:00:00", "exit": 0, "figures": []}
    for name, r in (("a", good), ("b", failed), ("c", other)):
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    assert cost_table.load(tmp_path) == [good]


def test_writing_replaces_only_the_table() -> None:
    readme = f"# x\n\nbefore\n\n{cost_table.HEADER} v1 | 1 |\n|---|---|\n| a | b |\n\nafter\n"
    out = cost_table.with_table(readme, f"{cost_table.HEADER} v2 | 2 |\n|---|---|")
    assert out == f"# x\n\nbefore\n\n{cost_table.HEADER} v2 | 2 |\n|---|---|\n\nafter\n"
    assert cost_table.in_readme(out) == f"{cost_table.HEADER} v2 | 2 |\n|---|---|"
