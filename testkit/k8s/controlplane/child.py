"""The control plane's child processes: each in its own process group, logging to a file, dying with
this process unless detached."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """preexec_fn: have the kernel SIGTERM the child when the forking thread's process dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class Child:
    """One child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], log: Path, *, detached: bool) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.detached = detached
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        logf: IO[bytes]
        with self.log.open("ab") as logf:
            logf.write(f"\n=== {time.strftime('%H:%M:%S')} starting {self.name}\n".encode())
            logf.flush()
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg reaches all of it
                preexec_fn=None if self.detached else die_with_parent,  # noqa: PLW1509
                close_fds=True,
            )

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        p = self.popen
        if p is None:
            return
        self.popen = None
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # Anything left in the group (nothing, normally: these binaries don't fork).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
