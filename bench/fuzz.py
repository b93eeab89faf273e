"""The long fuzz run: tests/fuzz with the `long` hypothesis profile (thousands of examples each).

    flock /tmp/nftproxy-heavy.lock .venv/bin/python -m bench.fuzz [-k EXPR] [--examples N]

Prints hypothesis' statistics per test (examples run, failures found) and exits non-zero on any
failure. Needs root (the kernel checks run in a network namespace of their own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.fuzz")
    p.add_argument("-k", default="", help="pytest -k expression")
    p.add_argument("--examples", type=int, default=0, help="examples per test (default: the long profile's)")
    args = p.parse_args(argv)
    env = dict(os.environ, NFTPROXY_FUZZ="long")
    if args.examples:
        env["NFTPROXY_FUZZ_EXAMPLES"] = str(args.examples)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics", "tests/fuzz"]
    if args.k:
        cmd += ["-k", args.k]
    start = time.monotonic()
    rc = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
    print(f"bench.fuzz: exit {rc} after {time.monotonic() - start:.0f}s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
