"""Per-figure results: ``figure(...)`` records one measured value (with what it is, its unit and
the labels that place it, e.g. ``services=10000, proxy="nftproxy"``); ``python -m bench`` writes
them as ``figures`` in the run's JSON, next to the printed output. A benchmark run directly
(``python -m bench.apply``) records into the same list, which nobody reads."""

from __future__ import annotations

import math
from typing import Any

FIGURES: list[dict[str, Any]] = []


def figure(what: str, value: float | int | None, unit: str, **labels: Any) -> None:
    FIGURES.append({"what": what, "value": value, "unit": unit, **labels})


def ratio(x: float, y: float) -> float | None:
    """x / y (one proxy's figure to another's), None when y is 0 or either is NaN."""
    return x / y if y and not math.isnan(x) and not math.isnan(y) else None
