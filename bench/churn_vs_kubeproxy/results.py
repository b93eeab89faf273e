"""One run's figures, and the report of all runs: the table, the percentiles, metric sums."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.figures import ratio
from bench.slicechurn.stream import ENDPOINTS


@dataclass
class Run:
    proxy: str
    rate: float
    seconds: float = 0.0  # churn wall time
    writes: int = 0
    failures: int = 0
    late: int = 0
    user_s: float = 0.0
    system_s: float = 0.0
    rss_start: float = 0.0
    rss_end: float = 0.0
    rss_peak: float = 0.0
    latencies: list[float] = field(default_factory=list)
    awaited: int = 0
    missed: int = 0
    syncs: float = 0.0  # IPv4 (nftproxy counts one sync in each family; kube-proxy's IPv6 proxier has no change)
    syncs_all: float = 0.0  # all families
    sync_seconds: float = 0.0  # IPv4 syncs' summed duration
    npd_sum: float = 0.0  # the proxy's own network programming histogram over the churn: sum, count
    npd_count: float = 0.0
    bytes_down: int = 0  # over the churn
    bytes_up: int = 0
    bytes_start: int = 0  # from the proxy's start to the churn's (the initial lists, the first syncs)
    bytes_total: int = 0  # from the proxy's start to the churn's end: bytes_start + bytes_down
    first_sync: float = 0.0
    overruns: int = 0
    load: tuple[float, float] = (0.0, 0.0)  # 1-min load average at the churn's start and end

    def per_min(self, x: float) -> float:
        return x / self.seconds * 60 if self.seconds else float("nan")

    @property
    def rss_change(self) -> float:
        return (self.rss_end - self.rss_start) / self.rss_start * 100 if self.rss_start else float("nan")


def pct(values: list[float], p: float) -> float | None:
    """The nearest-rank percentile (p in 0..1) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


def metric_sum(metrics: dict[str, float], name: str, family: str | None = None) -> float:
    """The sum of a metric's samples over its labels (only those of ``ip_family`` FAMILY, if given)."""
    return sum(
        v
        for k, v in metrics.items()
        if (k == name or k.startswith(name + "{")) and (family is None or f'ip_family="{family}"' in k)
    )


def or_dash(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


RSS_FLAT = 5.0  # %: the RSS at the churn's end within this of its start


@dataclass(frozen=True)
class Ratios:
    """A proxy's run against kube-proxy's at the same rate: CPU per minute of churn (user +
    system), bytes from the apiserver from the start to the churn's end, peak RSS."""

    cpu: float | None
    bytes: float | None
    rss: float | None


def ratios(runs: list[Run]) -> dict[tuple[float, str], Ratios]:
    """Each non-kube-proxy run's ratios to the kube-proxy run at its rate, by (rate, proxy)."""
    kp = {r.rate: r for r in runs if r.proxy == "kube-proxy"}
    out = {}
    for r in runs:
        if r.proxy != "kube-proxy" and (k := kp.get(r.rate)) is not None:
            out[(r.rate, r.proxy)] = Ratios(
                ratio(r.per_min(r.user_s + r.system_s), k.per_min(k.user_s + k.system_s)),
                ratio(r.bytes_total, k.bytes_total),
                ratio(r.rss_peak, k.rss_peak),
            )
    return out


def _x(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}x"


def report(runs: list[Run], services: int, version: str) -> None:
    print()
    print(f"kube-proxy {version} vs nftproxy, {services:,} Services x {ENDPOINTS} endpoints, EndpointSlice churn "
          "(rolling Deployments), min sync period 1 s (nftproxy@P: P); per minute of churn, but the bytes from "
          "the proxy's start to the churn's end (its initial lists included); ratios: to kube-proxy's at the "
          "same rate (RSS: the peak)")  # fmt: skip
    print()
    print("| writes/s (achieved) | proxy | CPU s/min user | CPU s/min system | CPU s/min total | CPU ratio | "
          "RSS start → end (peak) | RSS ratio | latency p50 / p99 | syncs (per min) | mean sync | "
          "MB from apiserver, start to end (before the churn) | bytes ratio | MB/min from apiserver during "
          "the churn | load 1-min start / end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rs = ratios(runs)
    for r in runs:
        total = r.per_min(r.user_s + r.system_s)
        x = rs.get((r.rate, r.proxy), Ratios(None, None, None))
        p50, p99 = pct(r.latencies, 0.5), pct(r.latencies, 0.99)
        print(
            f"| {r.rate:g} ({r.writes / r.seconds:.1f}) | {r.proxy} | {r.per_min(r.user_s):.2f} | "
            f"{r.per_min(r.system_s):.2f} | {total:.2f} | {_x(x.cpu)} | {r.rss_start:.0f} → {r.rss_end:.0f} MB "
            f"({r.rss_change:+.1f} %, peak {r.rss_peak:.0f}) | {_x(x.rss)} | {or_dash(p50 and p50 * 1000, '.0f')} / "
            f"{or_dash(p99 and p99 * 1000, '.0f')} ms | {r.syncs:.0f} ({r.per_min(r.syncs):.0f}) | "
            f"{or_dash(r.sync_seconds / r.syncs * 1000 if r.syncs else None, '.0f')} ms | "
            f"{r.bytes_total / 1e6:.2f} ({r.bytes_start / 1e6:.2f}) | {_x(x.bytes)} | "
            f"{r.per_min(r.bytes_down) / 1e6:.2f} | {r.load[0]:.2f} / {r.load[1]:.2f} |"
        )
    print()
    for r in runs:
        own = f"{r.npd_sum / r.npd_count * 1000:.0f} ms mean of {r.npd_count:.0f}" if r.npd_count else "none"
        print(
            f"  {r.proxy} at {r.rate:g}/s: {r.writes} writes in {r.seconds:.1f} s ({r.failures} failed, "
            f"{r.late} dispatched late), first sync {r.first_sync:.2f} s; latency samples {len(r.latencies)} of "
            f"{r.awaited} ({r.missed} never seen); syncs IPv4 {r.syncs:.0f}, all families {r.syncs_all:.0f}; "
            f"its own network-programming histogram: {own}; "
            f"bytes from / to the apiserver over the churn {r.bytes_down:,} / {r.bytes_up:,}, "
            f"from its start {r.bytes_total:,}" + (f"; netlink overruns {r.overruns}" if r.overruns else "")
        )
    print()
    for (rate, proxy), x in rs.items():
        r = next(r for r in runs if (r.rate, r.proxy) == (rate, proxy))
        checks = [
            ("CPU ≤ 0.5x kube-proxy's", x.cpu, x.cpu is not None and x.cpu <= 0.5),
            ("bytes ≤ 1.0x", x.bytes, x.bytes is not None and x.bytes <= 1.0),
            ("RSS ≤ 0.75x", x.rss, x.rss is not None and x.rss <= 0.75),
        ]
        print(f"  goals, {proxy} at {rate:g}/s: "
              + "; ".join(f"{what} {_x(v) or '-'} {'met' if ok else 'NOT met'}" for what, v, ok in checks)
              + f"; RSS flat within ±{RSS_FLAT:g} % {r.rss_change:+.1f} % "
              + ("met" if abs(r.rss_change) <= RSS_FLAT else "NOT met"))  # fmt: skip
