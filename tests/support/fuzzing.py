"""Fuzzing profiles: bounded for `make test` (NFTPROXY_FUZZ=ci, the default), a quarter of that
for `make check` (NFTPROXY_FUZZ=check), long for `bench/fuzz.py` (NFTPROXY_FUZZ=long); and the
kernel's dry run the fuzz tests check scripts with. Loaded by tests/fuzz/conftest.py.

NFTPROXY_FUZZ_EXAMPLES=N overrides the number of examples of every fuzz test.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from hypothesis import HealthCheck, settings

_COMMON: dict[str, Any] = {
    "database": None,  # no .hypothesis directory in the tree; failures print their reproduction blob
    "print_blob": True,
    "deadline": None,  # a shared 2-core machine: timing is not the property under test
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
PROFILE = os.environ.get("NFTPROXY_FUZZ", "ci")
for _name in ("ci", "check", "long"):
    settings.register_profile(_name, **_COMMON)
settings.load_profile(PROFILE)

LONG = PROFILE == "long"


def examples(ci: int, long: int) -> int:
    """Examples for one test: ``ci`` in `make test`, a quarter of it (at least 5) in `make check`,
    ``long`` for the bench run (or the env's N)."""
    override = os.environ.get("NFTPROXY_FUZZ_EXAMPLES")
    if override:
        return int(override)
    if PROFILE == "check":
        return max(ci // 4, 5)
    return long if LONG else ci


class DryRun:
    """`nft -c -f -` inside a namespace of our own: the kernel validates the whole batch and then
    aborts it; nothing is ever committed. A child process, not libnftables in this one: nft 1.0.6
    abort()s on some inputs (an assertion), which would take the test run down with it."""

    def __init__(self, netns: str) -> None:
        self.netns = netns

    def check(self, script: str) -> tuple[int, str]:
        r = subprocess.run(
            ["ip", "netns", "exec", self.netns, "nft", "-c", "-f", "-"],
            input=script, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return r.returncode, r.stderr

    def close(self) -> None:
        pass
