"""The ``nftproxy.io/load-balancing`` annotation (what the algorithms do: compiler/balancing.py)
and ``nftproxy.io/maglev-table-size`` (the Maglev table: compiler/maglev.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANNOTATION = "nftproxy.io/load-balancing"
RANDOM, ROUND_ROBIN, SOURCE_HASH, MAGLEV = "random", "round-robin", "source-hash", "maglev"
ALGORITHMS = (RANDOM, ROUND_ROBIN, SOURCE_HASH, MAGLEV)

TABLE_SIZE_ANNOTATION = "nftproxy.io/maglev-table-size"
# A Maglev table holds M slots per frontend, M a prime: one map element each. 251 keeps a table
# of 10k Services loadable (docs/load-balancing.md); ~100 x N keeps the clients moved by a change
# of one endpoint within ~1.2/N. 4093 bounds what one Service may cost a node.
DEFAULT_TABLE_SIZE, MIN_TABLE_SIZE, MAX_TABLE_SIZE = 251, 31, 4093


def is_prime(n: int) -> bool:
    if n < 2 or (n % 2 == 0 and n != 2):
        return False
    i = 3
    while i * i <= n:
        if n % i == 0:
            return False
        i += 2
    return True


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


def table_size_from_annotations(annotations: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """(the Service's Maglev table size or None for the default, a warning for a bad value: then
    the default). Read whatever the algorithm: the node's default may be maglev."""
    value = annotations.get(TABLE_SIZE_ANNOTATION)
    if value is None:
        return None, None
    text = str(value).strip()
    if text.isdigit() and len(text) <= 6:
        size = int(text)
        if MIN_TABLE_SIZE <= size <= MAX_TABLE_SIZE and is_prime(size):
            return size, None
    shown = text if len(text) <= 40 else text[:40] + "..."
    return None, (
        f"annotation {TABLE_SIZE_ANNOTATION}: {shown!r} is not a prime from {MIN_TABLE_SIZE} to "
        f"{MAX_TABLE_SIZE}: a Maglev table of {DEFAULT_TABLE_SIZE} slots (the Service is programmed)"
    )
