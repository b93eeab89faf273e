"""The README's cost table, made from the benchmarks' results committed in ``docs/results/``.

    .venv/bin/python -m bench.cost_table           # print it
    .venv/bin/python -m bench.cost_table --write   # put it into README.md in place of the one there

``docs/results/`` holds the JSON files ``python -m bench`` wrote for churn_vs_kubeproxy and
controlplane_vs_kubeproxy (copied from ``bench/results/``, one per benchmark and size:
``<bench>-<services>.json``); of several runs of one benchmark at one size, the latest that exited
0 counts. Each size gives a column; each cell is nftproxy / kube-proxy and their ratio; the last
row, the runs' commands (without ``--netns-prefix`` and ``--forward-port``, which only name their
namespaces and ports). tests/unit/test_cost_table.py checks that README.md holds what this makes
of the committed files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.figures import ratio

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
README = ROOT / "README.md"
HEADER = "| per node: nftproxy / kube-proxy"  # how the table starts (its first cell)
BENCHES = ("churn_vs_kubeproxy", "controlplane_vs_kubeproxy")
TIMES, MISSING = "\N{MULTIPLICATION SIGN}", "\N{EN DASH}"  # a ratio (2.00 times), a cell without a run
NAMING = ("--netns-prefix", "--forward-port")  # flags that only name a run's namespaces and ports


def load(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """Every result file of BENCHES in ``folder`` that exited 0."""
    results = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    return [r for r in results if r.get("bench") in BENCHES and r.get("exit") == 0]


def latest(results: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The latest run of each benchmark at each size, by (bench, services)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(results, key=lambda r: str(r["started"])):
        sizes = {f["services"] for f in r["figures"] if "services" in f}
        for services in sizes:
            out[(r["bench"], services)] = r
    return out


def _value(run: dict[str, Any], what: str, **labels: Any) -> float | None:
    """The one figure ``what`` with these labels, or None."""
    found = [f["value"] for f in run["figures"] if f["what"] == what and all(f.get(k) == v for k, v in labels.items())]
    if len(found) > 1:
        raise ValueError(f"{run['bench']}: {len(found)} figures {what!r} {labels}")
    return found[0] if found else None


def _ratio(ours: float | None, theirs: float | None) -> str:
    r = None if ours is None or theirs is None else ratio(ours, theirs)
    return "" if r is None else f" ({r:.2f}{TIMES})"


def _pair(ours: float | None, theirs: float | None, fmt: str, unit: str) -> str:
    if ours is None or theirs is None:
        return MISSING
    return f"{ours:{fmt}} / {theirs:{fmt}} {unit}{_ratio(ours, theirs)}"


def _rates(run: dict[str, Any]) -> list[float]:
    return sorted({f["rate"] for f in run["figures"] if "rate" in f})


def _churn_cells(run: dict[str, Any] | None) -> list[str]:
    """CPU under churn, bytes from the start through the churn, RSS, first sync."""
    if run is None:
        return [MISSING] * 4
    rates = _rates(run)

    def cpu(proxy: str, rate: float) -> float | None:
        user = _value(run, "CPU user per minute", proxy=proxy, rate=rate)
        system = _value(run, "CPU system per minute", proxy=proxy, rate=rate)
        return None if user is None or system is None else user + system

    def each(proxy: str, what: str) -> list[float]:
        return [v for rate in rates if (v := _value(run, what, proxy=proxy, rate=rate)) is not None]

    what = "bytes from apiserver, start to churn end"
    mb = {p: {rate: _value(run, what, proxy=p, rate=rate) for rate in rates} for p in ("nftproxy", "kube-proxy")}
    peaks = {p: max(each(p, "RSS peak"), default=None) for p in ("nftproxy", "kube-proxy")}
    changes = each("nftproxy", "RSS change over the churn")
    change = max(changes, key=abs) if changes else None
    first = {p: statistics.median(v) if (v := each(p, "first sync")) else None for p in ("nftproxy", "kube-proxy")}
    return [
        "; ".join(_pair(cpu("nftproxy", r), cpu("kube-proxy", r), ".2f", "s") for r in rates),
        "; ".join(
            _pair(
                None if (x := mb["nftproxy"][r]) is None else x / 1e6,
                None if (y := mb["kube-proxy"][r]) is None else y / 1e6,
                ".1f",
                "MB",
            )
            for r in rates
        ),
        _pair(peaks["nftproxy"], peaks["kube-proxy"], ".0f", "MB")
        + ("" if change is None else f"; nftproxy's {change:+.1f} % over the churn"),
        _pair(first["nftproxy"], first["kube-proxy"], ".2f", "s"),
    ]


def _control_plane_cell(run: dict[str, Any] | None) -> str:
    """At the lowest rate (where ten proxies of either kind leave a 2-core machine room), with P
    proxies of each kind: the kube-apiserver's CPU per minute of churn (serving the writes and the
    proxies: the share above the writes alone is the difference of two runs, noisier than either),
    and the bytes it sent each proxy per minute."""
    if run is None:
        return MISSING
    rate = min(_rates(run))
    kinds = ("nftproxy", "kube-proxy")
    cpu = {k: _value(run, "apiserver CPU per minute of churn", kind=k, rate=rate) for k in kinds}
    mb = {k: None if (v := _value(run, "bytes per proxy per minute of churn", kind=k, rate=rate)) is None else v / 1e6
          for k in kinds}  # fmt: skip
    return "; ".join(
        (_pair(cpu["nftproxy"], cpu["kube-proxy"], ".2f", "s"), _pair(mb["nftproxy"], mb["kube-proxy"], ".1f", "MB"))
    )


def command(run: dict[str, Any]) -> str:
    """``python -m bench NAME ARGS`` of a run, without the flags that only name its resources."""
    args: list[str] = []
    skip = False
    for a in run["argv"]:
        if skip:
            skip = False
        elif a in NAMING:
            skip = True
        elif not a.startswith(tuple(f"{n}=" for n in NAMING)):
            args.append(a)
    return " ".join(["python -m bench", run["bench"], *args])


def _rates_text(runs: Iterable[dict[str, Any]]) -> str:
    rates = sorted({r for run in runs for r in _rates(run)})
    return " / ".join(f"{r:g}" for r in rates)


def table(results: list[dict[str, Any]]) -> str:
    """The table, its last row the commands."""
    runs = latest(results)
    sizes = sorted({services for _, services in runs})
    if not sizes:
        raise ValueError("no results of churn_vs_kubeproxy or controlplane_vs_kubeproxy")
    churn = {s: runs.get(("churn_vs_kubeproxy", s)) for s in sizes}
    plane = {s: runs.get(("controlplane_vs_kubeproxy", s)) for s in sizes}
    churn_rates = _rates_text(r for r in churn.values() if r is not None)
    plane_runs = [r for r in plane.values() if r is not None]
    proxies = max((f.get("proxies", 0) for r in plane_runs for f in r["figures"]), default=0)
    plane_rate = min((min(_rates(r)) for r in plane_runs), default=0.0)
    cells = {s: _churn_cells(churn[s]) for s in sizes}
    rows = [
        f"CPU under churn, per minute, at {churn_rates} writes/s",
        f"Bytes from the API server, from the start through the churn, at {churn_rates} writes/s",
        "Memory (RSS), peak",
        "First sync",
    ]
    versions = sorted({str(f["kube_proxy"]) for r in runs.values() for f in r["figures"] if "kube_proxy" in f})
    lines = [
        f"{HEADER} {', '.join(versions)} (ratio) | " + " | ".join(f"{s:,} Services" for s in sizes) + " |",
        "|---" * (len(sizes) + 1) + "|",
        *(f"| {row} | " + " | ".join(cells[s][i] for s in sizes) + " |" for i, row in enumerate(rows)),
    ]
    if plane_runs:
        lines.append(
            f"| Control plane, {proxies} nodes at {plane_rate:g} writes/s: kube-apiserver CPU per minute (the writes "
            f"and the {proxies} proxies); bytes it sends each node per minute | "
            + " | ".join(_control_plane_cell(plane[s]) for s in sizes)
            + " |"
        )
    lines.append("| Commands | " + " | ".join(_commands(churn[s], plane[s]) for s in sizes) + " |")
    return "\n".join(lines)


def _commands(*runs: dict[str, Any] | None) -> str:
    return ", ".join(f"`{command(r)}`" for r in runs if r is not None) or MISSING


def _span(readme: str) -> tuple[int, int]:
    """Where the table is in ``readme``: from its header line (HEADER) through its last row."""
    start = end = readme.index("\n" + HEADER) + 1
    for line in readme[start:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        end += len(line)
    return start, end


def with_table(readme: str, block: str) -> str:
    """``readme`` with its cost table replaced by ``block``."""
    start, end = _span(readme)
    return readme[:start] + block + "\n" + readme[end:]


def in_readme(readme: str) -> str:
    """The README's cost table."""
    start, end = _span(readme)
    return readme[start:end].removesuffix("\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.cost_table", description=__doc__)
    p.add_argument("--write", action="store_true", help="put the table into README.md")
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    block = table(load(args.results))
    if args.write:
        README.write_text(with_table(README.read_text(), block))
    else:
        print(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
