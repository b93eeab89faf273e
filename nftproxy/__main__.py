"""``python -m nftproxy`` (what the chart and the benchmarks run). For ``run``, the first lists
start before the rest of nftproxy is imported (operator/early.py)."""

import sys

from nftproxy.operator import early

early.start(sys.argv[1:])

from nftproxy.cli import entry  # noqa: E402  (after the lists have started)

entry()
