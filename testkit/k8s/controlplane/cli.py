"""``python -m testkit.k8s.controlplane up|down|status --dir DIR``: a detached control plane for the
demo."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testkit.k8s.controlplane.constants import STATE_FILE
from testkit.k8s.controlplane.errors import ControlPlaneError
from testkit.k8s.controlplane.plane import ControlPlane
from testkit.process import cmdline, pid_alive


def _read_state(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((d / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _our_pids(d: Path, state: dict[str, Any]) -> dict[str, int]:
    """PIDs from the state file that still run our binary with our work dir (no PID-reuse kills)."""
    out: dict[str, int] = {}
    for name, pid in (state.get("pids") or {}).items():
        argv = cmdline(int(pid))
        if argv and Path(argv[0]).name == name and any(str(d) in a for a in argv):
            out[name] = int(pid)
    return {n: p for n, p in out.items() if pid_alive(p)}


def _kill_detached(pids: dict[str, int], timeout: float = 15.0) -> None:
    for name in ("kube-apiserver", "etcd"):  # apiserver first, like stop()
        pid = pids.get(name)
        if pid is None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)


def _cmd_up(d: Path, timeout: float) -> int:
    state = _read_state(d)
    if state is not None:
        live = _our_pids(d, state)
        if len(live) == 2:
            print(f"control plane already up: {state['server']}, kubeconfig {d / 'kubeconfig'}")
            return 0
        _kill_detached(live)  # half-dead leftovers of an earlier run: start afresh
        for sub in ("etcd", "certs", "logs"):
            shutil.rmtree(d / sub, ignore_errors=True)
    cp = ControlPlane(d, detached=True, start_timeout=timeout)
    cp.start()  # on failure start() stops what it started and raises with the log tail
    print(f"control plane up: {cp.server}")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    # Leave the children running: forget them without stopping.
    cp._etcd = cp._apiserver = None
    return 0


def _cmd_down(d: Path) -> int:
    state = _read_state(d)
    if state is None:
        if d.exists():
            print(f"{d} holds no control plane ({STATE_FILE} missing); left alone", file=sys.stderr)
            return 1
        print("control plane already down")
        return 0
    _kill_detached(_our_pids(d, state))
    shutil.rmtree(d, ignore_errors=True)
    print(f"control plane down; removed {d}")
    return 0


def _cmd_status(d: Path) -> int:
    state = _read_state(d)
    live = _our_pids(d, state) if state else {}
    if state is None or len(live) != 2:
        print(f"down (running: {', '.join(live) or 'nothing'})")
        return 1
    print(f"up: {state['server']} kubeconfig {state['kubeconfig']} pids {live}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.k8s.controlplane",
        description="Run etcd + kube-apiserver on 127.0.0.1 (detached) for the demo.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, text in (
        ("up", "start detached; return once ready (writes DIR/kubeconfig)"),
        ("down", "stop and remove DIR"),
        ("status", "exit 0 if up"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--dir", required=True, type=Path, help="work directory")
        if name == "up":
            p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait")
    args = parser.parse_args(argv)
    d: Path = args.dir.resolve()
    try:
        if args.cmd == "up":
            return _cmd_up(d, args.timeout)
        if args.cmd == "down":
            return _cmd_down(d)
        return _cmd_status(d)
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
