"""The node's conntrack settings that kube-proxy sets at start (``--conntrack-tcp-timeout-*``,
``--conntrack-tcp-be-liberal``, ``--conntrack-udp-timeout*``, ``--conntrack-max-per-core``,
``--conntrack-min``), with kube-proxy's defaults and semantics (pkg/proxy/conntrack/sysctls.go): a
value of 0 leaves that sysctl alone, and a sysctl is written only when it differs.
``nf_conntrack_max`` is only ever raised, to max(max-per-core x CPUs, min) (at most 2^20), and the
conntrack hash size (the nf_conntrack module's ``hashsize`` parameter) to a quarter of it.

Why a proxy sets them: a Service connection whose peer closed first sits in CLOSE_WAIT, and the
kernel's default (60 s) drops its conntrack entry while the application may still write to it;
kube-proxy raises CLOSE_WAIT to 1 h and ESTABLISHED to 24 h on every node (upstream e2e:
"KubeProxy should set TCP CLOSE_WAIT timeout").

These are per network namespace: written in the programmed one (``--netns``, or the process's).
In a container, /proc/sys is read-only; the chart mounts the node's /proc/sys/net/netfilter
elsewhere (``--conntrack-sysctl-dir``), which needs CAP_NET_ADMIN only, not a privileged pod.
Unlike kube-proxy, which exits when it cannot set one, nftproxy logs why and goes on proxying.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from nftproxy.nft import netns as netns_mod

log = logging.getLogger("nftproxy.conntrack")

DEFAULT_DIR = "/proc/sys/net/netfilter"
HASHSIZE_FILE = "/sys/module/nf_conntrack/parameters/hashsize"
MAX_LIMIT = 1048576  # kube-proxy's cap of max-per-core x CPUs
_ONLINE_CPUS = "/sys/devices/system/cpu/online"


def online_cpus(path: str = _ONLINE_CPUS) -> int:
    """The number of online CPUs, as kube-proxy counts them (k8s.io/utils/cpuset.NumCPU: the
    ranges of /sys/devices/system/cpu/online, e.g. ``0-3,6``), else ``os.cpu_count()``."""
    try:
        with open(path) as f:
            text = f.read().strip()
        n = 0
        for part in text.split(","):
            first, _, last = part.partition("-")
            n += int(last or first) - int(first) + 1
        if n > 0:
            return n
    except (OSError, ValueError):
        pass
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ConntrackSysctls:
    """Seconds (0: leave alone), as kube-proxy's KubeProxyConntrackConfiguration."""

    tcp_established: int = 0
    tcp_close_wait: int = 0
    tcp_be_liberal: bool = False
    udp: int = 0
    udp_stream: int = 0
    directory: str = DEFAULT_DIR
    max_per_core: int = 0  # nf_conntrack_max per CPU (0: leave nf_conntrack_max and the hash size alone)
    min: int = 0  # the least nf_conntrack_max that max_per_core raises it to
    cpus: int = 0  # 0: online_cpus()
    hashsize_file: str = HASHSIZE_FILE

    def conntrack_max(self, cpus: int) -> int:
        """The nf_conntrack_max kube-proxy raises the node's to (0: none), as its getConntrackMax."""
        if self.max_per_core <= 0:
            return 0
        scaled = self.max_per_core * cpus
        if scaled > MAX_LIMIT:
            return MAX_LIMIT
        return max(scaled, self.min)

    def wanted(self) -> dict[str, int]:
        """sysctl name -> value, only those to set."""
        out = {
            "nf_conntrack_tcp_timeout_established": self.tcp_established,
            "nf_conntrack_tcp_timeout_close_wait": self.tcp_close_wait,
            "nf_conntrack_tcp_be_liberal": int(self.tcp_be_liberal),
            "nf_conntrack_udp_timeout": self.udp,
            "nf_conntrack_udp_timeout_stream": self.udp_stream,
        }
        return {k: v for k, v in out.items() if v > 0}


@dataclass(frozen=True)
class Outcome:
    name: str
    before: int | None  # None: not readable
    after: int
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.error is None and self.before != self.after


def _read(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())


def _write(name: str, path: str, before: int | None, value: int) -> Outcome:
    try:
        with open(path, "w") as f:
            f.write(f"{value}\n")
    except OSError as e:
        return Outcome(name, before, value, f"cannot write {path}: {e.strerror or e}")
    return Outcome(name, before, value)


def _raise_max(cfg: ConntrackSysctls) -> list[Outcome]:
    """nf_conntrack_max raised (never lowered) to ``conntrack_max``, then the hash size to a
    quarter of that when smaller, as kube-proxy's setSysctls."""
    wanted = cfg.conntrack_max(cfg.cpus or online_cpus())
    if wanted <= 0:
        return []
    out = []
    name, path = "nf_conntrack_max", os.path.join(cfg.directory, "nf_conntrack_max")
    try:
        before: int | None = _read(path)
    except (OSError, ValueError):
        before = None  # kube-proxy writes it when unreadable
    if before is not None and before >= wanted:
        out.append(Outcome(name, before, before))
    else:
        out.append(_write(name, path, before, wanted))
    name, path = "hashsize", cfg.hashsize_file
    try:
        size = _read(path)
    except (OSError, ValueError) as e:
        return [*out, Outcome(name, None, wanted // 4, f"cannot read {path}: {e}")]
    out.append(_write(name, path, size, wanted // 4) if size < wanted // 4 else Outcome(name, size, size))
    return out


def _apply_here(cfg: ConntrackSysctls) -> list[Outcome]:
    out = _raise_max(cfg)
    for name, value in cfg.wanted().items():
        path = os.path.join(cfg.directory, name)
        try:
            before: int | None = _read(path)
        except (OSError, ValueError) as e:
            out.append(Outcome(name, None, value, f"cannot read {path}: {e}"))
            continue
        if before == value:
            out.append(Outcome(name, before, value))
            continue
        out.append(_write(name, path, before, value))
    return out


def apply(cfg: ConntrackSysctls, netns: str | None) -> list[Outcome]:
    """Set what ``cfg`` asks for in ``netns`` (a throwaway thread enters it), log each change and
    each failure; never raises for a sysctl that cannot be set."""
    if not cfg.wanted() and cfg.max_per_core <= 0:
        return []
    try:
        outcomes = netns_mod.call_in(netns, lambda: _apply_here(cfg), "conntrack-sysctls")
    except OSError as e:  # e.g. the namespace is gone
        log.warning("conntrack settings not applied: %s", e)
        return []
    for o in outcomes:
        if o.error:
            log.warning("conntrack: %s not set to %d: %s", o.name, o.after, o.error)
        elif o.changed:
            log.info("conntrack: set %s %s -> %d", o.name, o.before, o.after)
    return outcomes
