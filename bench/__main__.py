"""``python -m bench NAME [ARGS]``: the one entry point of the benchmarks.

NAME is one of ``BENCHES`` (``python -m bench`` lists them with their first lines); ARGS go to
that benchmark (``python -m bench apply --help``). What it prints is shown as it comes and is also
written, with the command, the time and the exit status, as one JSON file in ``bench/results/``
(``$NFTPROXY_BENCH_RESULTS`` for another folder), with each measured value as a field of its own
(``figures``: what, value, unit and labels, see ``bench/figures.py``): ``NAME-<UTC time>.json``. docs/benchmarks.md
quotes these runs; docs/performance.md names the benchmark that guards each speed trick.

The benchmarks share builders and runners (``listed``, ``apiserver``, ``runners``, ``workload``,
``figures``, ``slicechurn``);
no benchmark imports another. Heavy ones take the machine's lock themselves when asked to
(``flock /tmp/nftproxy-heavy.lock python -m bench NAME``).
"""

from __future__ import annotations

import importlib
import io
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from bench.figures import FIGURES

BENCHES = (
    "apply", "churn", "churn_vs_kubeproxy", "controlplane_vs_kubeproxy", "datapath", "dataplane", "events", "fuzz",
    "localhost_proxy", "maglev", "operator", "realcluster", "startup", "udp_rollout",
    "vs_kubeproxy",
)  # fmt: skip
RESULTS = Path(os.environ.get("NFTPROXY_BENCH_RESULTS") or Path(__file__).with_name("results"))


class _Tee(io.TextIOBase):
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lines: list[str] = []
        self._part = ""

    def write(self, text: str) -> int:
        self.out.write(text)
        self._part += text
        *done, self._part = self._part.split("\n")
        self.lines += done
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def all_lines(self) -> list[str]:
        return self.lines + ([self._part] if self._part else [])


def _usage() -> str:
    rows = []
    for name in BENCHES:
        doc = (importlib.import_module(f"bench.{name}").__doc__ or "").strip().splitlines()
        rows.append(f"  {name:<13} {doc[0] if doc else ''}")
    return "usage: python -m bench NAME [ARGS]\n\n" + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHES:
        sys.stdout.write(_usage())
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name, args = argv[0], argv[1:]
    module = importlib.import_module(f"bench.{name}")
    started = datetime.now(UTC)
    t0 = time.monotonic()
    tee = _Tee(sys.stdout)
    sys.argv = [f"bench.{name}", *args]
    real, sys.stdout = sys.stdout, tee
    rc = 1
    try:
        rc = int(module.main() or 0)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        sys.stdout = real
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{name}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
        result = {
            "bench": name,
            "argv": args,
            "started": started.isoformat(),
            "seconds": round(time.monotonic() - t0, 3),
            "exit": rc,
            "load": os.getloadavg(),
            "figures": FIGURES,
            "output": tee.all_lines(),
        }
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"bench: {name} exit {rc}; result in {path}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
