"""Every golden ruleset is one the kernel accepts: `nft -c -f` (parse, then a check-only
transaction with the kernel) inside a namespace of its own, so a golden file can never hold a
table the kernel would refuse (which would block every Service)."""

from __future__ import annotations

import subprocess

import pytest

from testkit.lab.netlab import bare_netns
from tests.support.golden import CASES, GOLDEN

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kernel_accepts_the_golden_table(name: str) -> None:
    path = GOLDEN / f"{name}.nft"
    with bare_netns("ngk") as netns:
        check = ["ip", "netns", "exec", netns, "nft", "-c", "-f"]
        r = subprocess.run([*check, str(path)], check=False, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        # and a mutilated copy is refused, so the check can fail
        bad = path.read_text().replace("map @endpoints-", "map @no-such-map-", 1)
        assert bad != path.read_text()
        r = subprocess.run([*check, "-"], check=False, input=bad, capture_output=True, text=True)
        assert r.returncode != 0
