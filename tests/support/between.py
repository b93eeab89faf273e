"""``python -m tests.support.between ARGS``: the nftproxy command, with API writes made between its
first lists and the watches (tests/k8s/test_boot.py).

``$NFTPROXY_TEST_BETWEEN`` names a JSON file ``{"kubectl": [ARGV, ...], "done": PATH}``: right after
the first sync (the lists read, the table committed, kopf not imported yet), each ``kubectl ARGV``
runs against the apiserver of ``--kubeconfig``, then PATH is written with what the process had
done by then. Everything else is the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

VARIABLE = "NFTPROXY_TEST_BETWEEN"


def run_with_writes_between() -> None:
    from nftproxy.cli import entry  # noqa: PLC0415
    from nftproxy.operator import boot  # noqa: PLC0415
    from nftproxy.operator.early import Lists  # noqa: PLC0415
    from nftproxy.operator.syncer import Syncer  # noqa: PLC0415

    spec = json.loads(Path(os.environ[VARIABLE]).read_text())
    kubeconfig = sys.argv[sys.argv.index("--kubeconfig") + 1]
    first_sync = boot.first_sync

    async def first_sync_then_writes(syncer: Syncer, lists: Lists) -> Any:
        loaded = await first_sync(syncer, lists)
        done = {
            "syncs": syncer.status.syncs,
            "services": syncer.status.services,
            "kopf imported": "kopf" in sys.modules,
            "versions": loaded.versions if loaded else None,
        }
        for argv in spec["kubectl"]:
            subprocess.run([spec["binary"], f"--kubeconfig={kubeconfig}", *argv], check=True, capture_output=True)
        Path(spec["done"]).write_text(json.dumps(done))
        return loaded

    boot.first_sync = first_sync_then_writes
    entry()


if __name__ == "__main__":
    run_with_writes_between()
