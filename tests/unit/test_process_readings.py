"""testkit.process, on real processes: the CPU time of a process counts its children's, running
or reaped; a zombie is not alive; the memory and command line of a live process."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from testkit.process import cmdline, cpu_s, cpu_user_system, peak_rss_mb, pid_alive, rss_mb

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"


def test_cpu_time_counts_running_children_then_reaped_ones() -> None:
    # sh runs a child that burns 0.3 s of CPU, then (once it reaped it) sleeps
    sh = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "$BURN"; exec sleep 30'], env={**os.environ, "BURN": BURN})
    try:
        deadline = time.monotonic() + 10
        while cpu_s(sh.pid) < 0.1 and time.monotonic() < deadline:  # the running child is counted
            time.sleep(0.02)
        assert cpu_s(sh.pid) >= 0.1
        assert sum(cpu_user_system(sh.pid, running_children=False)) < 0.1  # … only with running_children
        while "sleep" not in cmdline(sh.pid) and time.monotonic() < deadline:  # the child reaped, sh is sleep
            time.sleep(0.02)
        assert sum(cpu_user_system(sh.pid, running_children=False)) >= 0.25  # in the children's time
    finally:
        sh.kill()
        sh.wait()


def test_a_zombie_is_not_alive_and_a_gone_process_reads_as_nothing() -> None:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while pid_alive(child.pid) and time.monotonic() < deadline:  # exited, not reaped: a zombie
        time.sleep(0.01)
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid) and cmdline(child.pid) == [] and math.isnan(rss_mb(child.pid))
    assert cpu_user_system(child.pid) == (0.0, 0.0)


def test_memory_and_command_line_of_a_live_process() -> None:
    me = os.getpid()
    assert pid_alive(me)
    assert 1 < rss_mb(me) <= peak_rss_mb(me) < 100_000
    assert cmdline(me)[0] == sys.argv[0] or "python" in cmdline(me)[0]
