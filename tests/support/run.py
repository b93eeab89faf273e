"""`python -m nftproxy ...` as a subprocess, the one way the tests run the command line."""

from __future__ import annotations

import subprocess
import sys
from typing import IO


def nftproxy_argv(*args: str) -> list[str]:
    """The command line of this interpreter's nftproxy (for a long-running process, or one run
    inside a lab node with ``NetLab.exec``); ``run_nftproxy`` for a command that ends."""
    return [sys.executable, "-m", "nftproxy", *args]


def run_nftproxy(
    *args: str,
    netns: str | None = None,
    input: str | None = None,
    stdin: IO[str] | None = None,
    check: bool = False,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Runs this interpreter's nftproxy with ``args`` (inside ``netns`` with ``ip netns exec``),
    output captured as text. ``check`` asserts exit status 0, showing stderr if not."""
    argv = nftproxy_argv(*args)
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    r = subprocess.run(argv, input=input, stdin=stdin, capture_output=True, text=True, check=False, timeout=timeout)
    if check:
        assert r.returncode == 0, f"nftproxy {' '.join(args)}: exit {r.returncode}\n{r.stderr}"
    return r
