"""One run's figures, and the report of all runs: the table, the percentiles, metric sums."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.churn_vs_kubeproxy.stream import ENDPOINTS


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
    bytes_down: int = 0
    bytes_up: int = 0
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


def report(runs: list[Run], services: int, version: str) -> None:
    print()
    print(f"kube-proxy {version} vs nftproxy, {services:,} Services x {ENDPOINTS} endpoints, EndpointSlice churn "
          "(rolling Deployments), min sync period 1 s (nftproxy@P: P); per minute of churn")  # fmt: skip
    print()
    print("| writes/s (achieved) | proxy | CPU s/min user | CPU s/min system | CPU s/min total | CPU ratio "
          "nftproxy/kube-proxy | RSS start → end (peak) | latency p50 / p99 | syncs (per min) | "
          "mean sync | MB/min from apiserver | load 1-min start / end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    by: dict[tuple[float, str], Run] = {(r.rate, r.proxy): r for r in runs}
    for r in runs:
        total = r.per_min(r.user_s + r.system_s)
        other = by.get((r.rate, "kube-proxy"))
        ratio = (
            f"{total / other.per_min(other.user_s + other.system_s):.3f}x"
            if r.proxy.startswith("nftproxy") and other and other.user_s + other.system_s
            else ""
        )
        p50, p99 = pct(r.latencies, 0.5), pct(r.latencies, 0.99)
        print(
            f"| {r.rate:g} ({r.writes / r.seconds:.1f}) | {r.proxy} | {r.per_min(r.user_s):.2f} | "
            f"{r.per_min(r.system_s):.2f} | {total:.2f} | {ratio} | {r.rss_start:.0f} → {r.rss_end:.0f} MB "
            f"({r.rss_change:+.1f} %, peak {r.rss_peak:.0f}) | {or_dash(p50 and p50 * 1000, '.0f')} / "
            f"{or_dash(p99 and p99 * 1000, '.0f')} ms | {r.syncs:.0f} ({r.per_min(r.syncs):.0f}) | "
            f"{or_dash(r.sync_seconds / r.syncs * 1000 if r.syncs else None, '.0f')} ms | "
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
            f"bytes from / to the apiserver {r.bytes_down:,} / {r.bytes_up:,}"
            + (f"; netlink overruns {r.overruns}" if r.overruns else "")
        )
