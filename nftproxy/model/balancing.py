"""The ``nftproxy.io/load-balancing`` annotation (what the algorithms do: compiler/balancing.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANNOTATION = "nftproxy.io/load-balancing"
RANDOM, ROUND_ROBIN, SOURCE_HASH = "random", "round-robin", "source-hash"
ALGORITHMS = (RANDOM, ROUND_ROBIN, SOURCE_HASH)


def from_annotations(annotations: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(the Service's algorithm or None for the node's default, a warning for a bad value: then
    random, whatever the node's default)."""
    value = annotations.get(ANNOTATION)
    if value is None:
        return None, None
    text = str(value).strip()
    if text in ALGORITHMS:
        return text, None
    return RANDOM, (
        f"annotation {ANNOTATION}: {text!r} is not one of {', '.join(ALGORITHMS)}: "
        "load-balanced at random (the Service is programmed)"
    )
