"""The fuzz tests' fixtures; their profiles and the dry run: tests/support/fuzzing.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.lab.netlab import bare_netns
from tests.support.fuzzing import DryRun


@pytest.fixture(scope="session")
def dry_run() -> Iterator[DryRun]:
    with bare_netns("vf") as name:
        d = DryRun(name)
        try:
            yield d
        finally:
            d.close()
