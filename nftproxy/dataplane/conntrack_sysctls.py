"""The node's conntrack settings that kube-proxy sets at start (``--conntrack-tcp-timeout-*``,
``--conntrack-tcp-be-liberal``, ``--conntrack-udp-timeout*``), with kube-proxy's defaults and
semantics: a value of 0 leaves that sysctl alone, and a sysctl is written only when it differs.

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


@dataclass(frozen=True)
class ConntrackSysctls:
    """Seconds (0: leave alone), as kube-proxy's KubeProxyConntrackConfiguration."""

    tcp_established: int = 0
    tcp_close_wait: int = 0
    tcp_be_liberal: bool = False
    udp: int = 0
    udp_stream: int = 0
    directory: str = DEFAULT_DIR

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


def _apply_here(cfg: ConntrackSysctls) -> list[Outcome]:
    out = []
    for name, value in cfg.wanted().items():
        path = os.path.join(cfg.directory, name)
        try:
            with open(path) as f:
                before: int | None = int(f.read().strip())
        except (OSError, ValueError) as e:
            out.append(Outcome(name, None, value, f"cannot read {path}: {e}"))
            continue
        if before == value:
            out.append(Outcome(name, before, value))
            continue
        try:
            with open(path, "w") as f:
                f.write(f"{value}\n")
        except OSError as e:
            out.append(Outcome(name, before, value, f"cannot write {path}: {e.strerror or e}"))
            continue
        out.append(Outcome(name, before, value))
    return out


def apply(cfg: ConntrackSysctls, netns: str | None) -> list[Outcome]:
    """Set what ``cfg`` asks for in ``netns`` (a throwaway thread enters it), log each change and
    each failure; never raises for a sysctl that cannot be set."""
    if not cfg.wanted():
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
