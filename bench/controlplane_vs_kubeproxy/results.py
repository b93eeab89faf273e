"""One run's figures, and the report of all runs: the table and the ratios to kube-proxy's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.figures import ratio
from bench.slicechurn.stream import ENDPOINTS


@dataclass
class Run:
    kind: str  # kube-proxy, nftproxy, or none (the writes alone)
    rate: float
    proxies: int
    idle_seconds: float = 0.0  # before the starts, nothing but the control plane running
    idle_apiserver_s: float = 0.0
    idle_etcd_s: float = 0.0
    start_seconds: float = 0.0  # from the first start to the last proxy synced (quiet 3 s)
    start_apiserver_s: float = 0.0
    start_etcd_s: float = 0.0
    start_bytes: list[int] = field(default_factory=list)  # per proxy, from its start to all synced
    seconds: float = 0.0  # churn wall time
    writes: int = 0
    failures: int = 0
    late: int = 0
    apiserver_s: float = 0.0  # over the churn
    etcd_s: float = 0.0
    churn_bytes: list[int] = field(default_factory=list)  # per proxy, over the churn
    proxies_cpu_s: float = 0.0  # the proxies' own CPU over the churn, summed
    apiserver_rss_start: float = 0.0
    apiserver_rss_end: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)

    def per_min(self, x: float) -> float:
        return x / self.seconds * 60 if self.seconds else float("nan")

    def idle_per_min(self) -> float:
        return self.idle_apiserver_s / self.idle_seconds * 60 if self.idle_seconds else float("nan")

    def start_above_idle(self) -> float:
        """The apiserver's CPU s for the starts less what it spends idle in as long."""
        return self.start_apiserver_s - self.idle_per_min() / 60 * self.start_seconds

    def bytes_per_min_per_proxy(self) -> float:
        return self.per_min(sum(self.churn_bytes)) / self.proxies if self.proxies else float("nan")

    def start_bytes_per_proxy(self) -> float:
        return sum(self.start_bytes) / self.proxies if self.proxies else float("nan")


@dataclass(frozen=True)
class Ratios:
    """nftproxy's run against kube-proxy's at the same rate: the apiserver's CPU per minute of
    churn and for the starts, the bytes per proxy per minute of churn and for its start."""

    apiserver_churn: float | None
    apiserver_start: float | None
    bytes_churn: float | None
    bytes_start: float | None


def ratios(runs: list[Run]) -> dict[tuple[float, str], Ratios]:
    """Each proxy kind's ratios to kube-proxy's at its rate, by (rate, kind)."""
    kp = {r.rate: r for r in runs if r.kind == "kube-proxy"}
    out = {}
    for r in runs:
        if r.kind not in ("kube-proxy", "none") and (k := kp.get(r.rate)) is not None:
            out[(r.rate, r.kind)] = Ratios(
                ratio(r.per_min(r.apiserver_s), k.per_min(k.apiserver_s)),
                ratio(r.start_apiserver_s, k.start_apiserver_s),
                ratio(r.bytes_per_min_per_proxy(), k.bytes_per_min_per_proxy()),
                ratio(r.start_bytes_per_proxy(), k.start_bytes_per_proxy()),
            )
    return out


def per_proxy_above_writes(runs: list[Run]) -> dict[tuple[float, str], float]:
    """The apiserver's CPU s/min over the churn above that of the writes alone (the run of kind
    none at the same rate), per proxy, by (rate, kind)."""
    none = {r.rate: r for r in runs if r.kind == "none"}
    return {
        (r.rate, r.kind): (r.per_min(r.apiserver_s) - none[r.rate].per_min(none[r.rate].apiserver_s)) / r.proxies
        for r in runs
        if r.proxies and r.rate in none
    }


def _x(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def _f(x: float, fmt: str = ".2f") -> str:
    return "-" if math.isnan(x) else format(x, fmt)


def report(runs: list[Run], services: int, version: str) -> None:
    proxies = max((r.proxies for r in runs), default=0)
    print()
    print(f"The control plane's side: {proxies} proxies of each kind (kube-proxy {version}, nftproxy) against "
          f"one kube-apiserver, {services:,} Services x {ENDPOINTS} endpoints, EndpointSlice churn (rolling "
          "Deployments); none: the writes alone, no proxy; ratios: nftproxy's to kube-proxy's at the same "
          "rate")  # fmt: skip
    print()
    print("| writes/s (achieved) | kind | apiserver CPU s/min, churn | ratio | above the writes alone, "
          "per proxy | etcd CPU s/min, churn | apiserver CPU s, the starts (s) | ratio | etcd CPU s, the starts "
          "| KB/min per proxy, churn | ratio | KB per proxy, start | ratio | proxies' CPU s/min | "
          "apiserver idle CPU s/min | apiserver RSS start → end | load 1-min start / end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rs = ratios(runs)
    above = per_proxy_above_writes(runs)
    for r in runs:
        x = rs.get((r.rate, r.kind), Ratios(None, None, None, None))
        a = above.get((r.rate, r.kind))
        print(
            f"| {r.rate:g} ({r.writes / r.seconds:.1f}) | {r.kind} | {r.per_min(r.apiserver_s):.2f} | "
            f"{_x(x.apiserver_churn)} | {'' if a is None else format(a, '.3f')} | {r.per_min(r.etcd_s):.2f} | "
            f"{r.start_apiserver_s:.2f} ({r.start_seconds:.1f}) | {_x(x.apiserver_start)} | {r.start_etcd_s:.2f} | "
            f"{_f(r.bytes_per_min_per_proxy() / 1e3, '.1f')} | {_x(x.bytes_churn)} | "
            f"{_f(r.start_bytes_per_proxy() / 1e3, '.1f')} | {_x(x.bytes_start)} | "
            f"{r.per_min(r.proxies_cpu_s):.2f} | {r.idle_per_min():.2f} | "
            f"{r.apiserver_rss_start:.0f} → {r.apiserver_rss_end:.0f} MB | {r.load[0]:.2f} / {r.load[1]:.2f} |"
        )
    print()
    for r in runs:
        print(
            f"  {r.kind} at {r.rate:g}/s: {r.writes} writes in {r.seconds:.1f} s ({r.failures} failed, "
            f"{r.late} dispatched late); the apiserver's CPU for the starts above idle {r.start_above_idle():.2f} s; "
            f"bytes per proxy over the churn "
            f"{', '.join(f'{b:,}' for b in r.churn_bytes) or '-'}; for the start "
            f"{', '.join(f'{b:,}' for b in r.start_bytes) or '-'}"
        )
    print()
    for (rate, kind), x in rs.items():
        checks = [("the apiserver's CPU over the churn", x.apiserver_churn), ("the starts'", x.apiserver_start),
                  ("bytes sent per proxy over the churn", x.bytes_churn), ("for its start", x.bytes_start)]  # fmt: skip
        print(f"  goals, {kind} at {rate:g}/s, ≤ kube-proxy's: "
              + "; ".join(f"{what} {_x(v) or '-'} {'met' if v is not None and v <= 1 else 'NOT met'}"
                          for what, v in checks))  # fmt: skip
