"""Readings of a running process (by pid) for the tests and benchmarks, through psutil: memory,
CPU time (with its children's), whether it is alive, its command line.

Only the peak RSS is read from ``/proc/PID/status`` (VmHWM): psutil does not report it."""

from __future__ import annotations

from pathlib import Path

import psutil

MIB = 1024 * 1024


def rss_mb(pid: int) -> float:
    """The resident set size (VmRSS) in MiB; NaN once the process is gone."""
    try:
        return psutil.Process(pid).memory_info().rss / MIB
    except psutil.Error:
        return float("nan")


def peak_rss_mb(pid: int) -> float:
    """The peak resident set size (VmHWM) in MiB; NaN once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return int(kib) / 1024 if kib is not None else float("nan")


def cpu_user_system(pid: int, *, running_children: bool = True) -> tuple[float, float]:
    """User and system CPU seconds the process has spent so far: its own, that of the children
    it has reaped (nftproxy's short-lived ``nft``, kube-proxy's ``nft`` runs) and, with
    ``running_children``, that of its children still running with theirs in turn (kube-proxy's
    ``nft`` of a big sync may still be exiting when the kernel has announced the last element).
    A child reaped between the reads is missed (not counted twice: the parent is read first)."""
    try:
        top = psutil.Process(pid)
        procs = [top, *(top.children(recursive=True) if running_children else ())]
    except psutil.Error:
        return 0.0, 0.0
    user = system = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:  # reaped since its parent listed it: in the parent's children_*, or missed
            continue
        user += t.user + t.children_user
        system += t.system + t.children_system
    return user, system


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of the process and its children, as ``cpu_user_system``."""
    return sum(cpu_user_system(pid))


def pid_alive(pid: int) -> bool:
    """Is ``pid`` running (a zombie, exited but not yet reaped, counts as gone)?"""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline(pid: int) -> list[str]:
    """The process's arguments; [] once it is gone (or not readable)."""
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def name(pid: int) -> str:
    """The process's name (its executable's); "" once it is gone."""
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return ""
