"""Fuzzing profiles: bounded for `make test`, long for `bench/fuzz.py` (NFTPROXY_FUZZ=long).

NFTPROXY_FUZZ_EXAMPLES=N overrides the number of examples of every fuzz test.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from nftproxy.nft import netns as netns_mod
from testkit.netlab import bare_netns

_COMMON: dict[str, Any] = {
    "database": None,  # no .hypothesis directory in the tree; failures print their reproduction blob
    "print_blob": True,
    "deadline": None,  # a shared 2-core machine: timing is not the property under test
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
settings.register_profile("ci", **_COMMON)
settings.register_profile("long", **_COMMON)
settings.load_profile(os.environ.get("NFTPROXY_FUZZ", "ci"))

LONG = os.environ.get("NFTPROXY_FUZZ") == "long"


def examples(ci: int, long: int) -> int:
    """Examples for one test: ``ci`` in `make test`, ``long`` for the bench run (or the env's N)."""
    override = os.environ.get("NFTPROXY_FUZZ_EXAMPLES")
    if override:
        return int(override)
    return long if LONG else ci


class DryRun:
    """libnftables in check mode, inside a namespace of our own: the kernel validates the whole
    batch and then aborts it (`nft -c`): nothing is ever committed."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nft-check")
        self._local = threading.local()

    def _ctx(self) -> Any:
        """A fresh context per check: a dry run leaves its objects in the context's cache (a second
        check of the same table then "overlaps" an interval that was never committed)."""
        if not getattr(self._local, "entered", False):
            netns_mod.enter(self.netns)
            self._local.entered = True
        import nftables  # noqa: PLC0415

        ctx = nftables.Nftables()
        ctx.set_dry_run(True)
        return ctx

    def check(self, script: str) -> tuple[int, str]:
        def go() -> tuple[int, str]:
            rc, _, err = self._ctx().cmd(script)
            return int(rc), str(err)

        return self._pool.submit(go).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="session")
def dry_run() -> Iterator[DryRun]:
    with bare_netns("vf") as name:
        d = DryRun(name)
        try:
            yield d
        finally:
            d.close()
