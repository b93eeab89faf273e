"""Processes and cgroups of the local cluster: started detached, found again and stopped by PID.

Every process is started in its own session (``killpg`` reaches it) and, for node-side daemons,
inside the cluster's cgroup ``/nftproxy-rc-NAME/...`` in every cgroup hierarchy, so that ``down``
finds everything that belongs to the cluster (pod processes included) even after a crash, kills it,
and removes the cgroups. A PID is only ever signalled when its command line still names the
cluster's state directory (no PID-reuse kills).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from testkit.process import cmdline, pid_alive

CGROUP_ROOT = Path("/sys/fs/cgroup")


def hierarchies() -> list[Path]:
    """Mounted cgroup hierarchies (v1 controllers, name=systemd, and the v2 unified one)."""
    out: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if fields[sep + 1] in ("cgroup", "cgroup2"):
            out.append(Path(fields[4]))
    return out


def make_cgroup(rel: str) -> None:
    """Create /REL (and its parents) in every hierarchy; cpuset ones get their parent's cpus/mems."""
    for h in hierarchies():
        d = h
        for part in Path(rel.strip("/")).parts:
            parent, d = d, d / part
            if not d.exists():
                d.mkdir()
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (d / knob).exists() and not (d / knob).read_text().strip():
                    (d / knob).write_text((parent / knob).read_text())


def join_cgroup(rel: str) -> None:
    """Move the calling process into /REL of every hierarchy (preexec_fn of a daemon)."""
    pid = str(os.getpid())
    for h in hierarchies():
        with contextlib.suppress(OSError):
            (h / rel.strip("/") / "cgroup.procs").write_text(pid)


def move_to_cgroup(pid: int, rel: str) -> None:
    """Move PID (a process that does not fork, e.g. etcd) into /REL of every hierarchy."""
    for h in hierarchies():
        with contextlib.suppress(OSError):
            (h / rel.strip("/") / "cgroup.procs").write_text(str(pid))


def cgroup_pids(rel: str) -> set[int]:
    """Every process in /REL or below, in any hierarchy."""
    pids: set[int] = set()
    for h in hierarchies():
        top = h / rel.strip("/")
        if not top.is_dir():
            continue
        # os.walk, not Path.rglob: containerd removes its containers' cgroups while we walk, and
        # rglob raises FileNotFoundError for a directory gone between listing and entering it
        for d, _, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (Path(d) / "cgroup.procs").read_text().split())
    return pids


def kill_cgroup(rel: str, timeout: float = 10.0) -> None:
    """SIGKILL every process in /REL (repeatedly: a dying shim may fork), then rmdir the tree."""
    deadline = time.monotonic() + timeout
    while (pids := {p for p in cgroup_pids(rel) if pid_alive(p)}) and time.monotonic() < deadline:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.1)
    for h in hierarchies():
        top = h / rel.strip("/")
        # bottom-up; directories may vanish meanwhile (containerd removes its containers' own)
        for d, _, _ in sorted(os.walk(top), key=lambda t: t[0].count("/"), reverse=True):
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still busy for a moment after its last task died
                    time.sleep(0.1)


def ours(pid: int, marker: str) -> bool:
    return pid_alive(pid) and marker in " ".join(cmdline(pid))


def spawn(
    argv: Sequence[str],
    log: Path,
    cgroup: str | None = None,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> int:
    """Start ARGV detached (own session, survives this process), output to LOG; return its PID."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as f:
        f.write(f"\n=== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
        f.flush()
        p = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: join_cgroup(cgroup)) if cgroup else None,  # noqa: PLW1509
            close_fds=True,
            pass_fds=tuple(pass_fds),
            env=env,
        )
    _children[p.pid] = p
    return p.pid


_children: dict[int, subprocess.Popen[bytes]] = {}


def reap() -> None:
    """Collect exited children started by this process (so they don't linger as zombies)."""
    for pid, p in list(_children.items()):
        if p.poll() is not None:
            del _children[pid]


def stop(pid: int, marker: str, timeout: float = 10.0) -> None:
    """SIGTERM the process group of PID (if it is still ours), SIGKILL after TIMEOUT; wait for it."""
    if not ours(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap()
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    while pid_alive(pid):
        reap()
        time.sleep(0.05)
    reap()
