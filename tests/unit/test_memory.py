"""`nftproxy run` tunes glibc's malloc before its first thread (nftproxy.heap): the
threads' allocations share the main arena. Checked in a child process with glibc's own report."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import ctypes, sys, threading
from nftproxy import heap as memory
if sys.argv[1] == "tuned":
    assert memory.tune()
def work():
    keep = [bytearray(200_000) for _ in range(20)] + [bytearray(100) for _ in range(10_000)]
t = threading.Thread(target=work); t.start(); t.join()
ctypes.CDLL("libc.so.6").malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def arenas(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return sum(line.startswith("Arena ") for line in out.stderr.splitlines())


def test_threads_allocate_from_the_one_arena_once_tuned() -> None:
    assert arenas("default") >= 2, "glibc gives a thread its own arena by default (the check can fail)"
    assert arenas("tuned") == 1
