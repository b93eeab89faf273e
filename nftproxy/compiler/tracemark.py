"""Names of ``nftproxy trace``'s temporary chains (pure: used by trace and by the syncer's check).

A trace adds two base chains to our table, ``trace-<deadline>-<pid>-prerouting`` and
``…-output``, whose rule also matches ``meta time < deadline``: even if the trace process is
killed, its rule stops marking packets at the deadline. The desired table never contains them,
so a full sync deletes them; the syncer's periodic check tolerates them until their deadline
(a trace in progress is not cut short) and then repairs the table, which removes them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

PREFIX = "trace-"
COMMENT = "nftproxy trace"
_NAME = re.compile(r"^trace-(\d+)-(\d+)-(prerouting|output)$")


def chain_names(deadline: float, pid: int) -> tuple[str, str]:
    base = f"{PREFIX}{int(deadline)}-{pid}"
    return f"{base}-prerouting", f"{base}-output"


def is_trace_chain(name: str) -> bool:
    return _NAME.match(name) is not None


def live(names: Iterable[str], now: float | None = None) -> set[str]:
    """The trace chains among ``names`` whose deadline has not passed."""
    now = time.time() if now is None else now
    out = set()
    for n in names:
        m = _NAME.match(n)
        if m and int(m.group(1)) > now:
            out.add(n)
    return out
