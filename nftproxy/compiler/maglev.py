"""Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
Balancer", NSDI 2016, section 3.4): a lookup table of M slots (M prime) filled with endpoints so
that each endpoint holds M/N slots, rounded down or up, and a change of one endpoint moves few
slots of the others. ``nftproxy.io/load-balancing: maglev`` (compiler/balancing.py) looks a
client up as ``jhash saddr mod M`` in that table.

Each endpoint (``address:port``, IPv6 as ``[address]:port``) has a preference list, the
permutation ``(offset + j * skip) mod M`` of the slots, with offset and skip from two halves of a
SHA-256 of its name: the same table on every node, in every process (no Python ``hash()``). The
endpoints take turns, in the order of their names (not the order of the EndpointSlices), each
claiming its next preferred free slot until the table is full.

Pure: no nft, no Kubernetes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache

from nftproxy.model.balancing import DEFAULT_TABLE_SIZE, TABLE_SIZE_ANNOTATION, is_prime
from nftproxy.nft.objects import Slot


def endpoint_name(endpoint: Slot) -> str:
    """The name an endpoint's permutation is hashed from: ``10.0.0.1:80``, ``[fd00::1]:80``."""
    address, port = endpoint
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def permutation(name: str, size: int) -> tuple[int, int]:
    """(offset, skip) of the endpoint called ``name`` in a table of ``size`` slots (prime): its
    j-th preferred slot is ``(offset + j * skip) % size``, each slot once over j < size."""
    digest = hashlib.sha256(name.encode()).digest()
    offset = int.from_bytes(digest[:8], "big") % size
    skip = int.from_bytes(digest[8:16], "big") % (size - 1) + 1
    return offset, skip


@lru_cache(maxsize=4096)
def _table(endpoints: tuple[Slot, ...], size: int) -> tuple[Slot, ...]:
    ordered = sorted(set(endpoints), key=endpoint_name)
    n = len(ordered)
    prefs = [permutation(endpoint_name(e), size) for e in ordered]
    entry: list[int] = [-1] * size
    nxt = [0] * n
    filled = 0
    while True:
        for i in range(n):
            offset, skip = prefs[i]
            j = nxt[i]
            slot = (offset + j * skip) % size
            while entry[slot] >= 0:
                j += 1
                slot = (offset + j * skip) % size
            entry[slot] = i
            nxt[i] = j + 1
            filled += 1
            if filled == size:
                return tuple(ordered[k] for k in entry)


def clear_cache() -> None:
    """Forget the tables computed (a benchmark measures the computation)."""
    _table.cache_clear()


def table(endpoints: Sequence[Slot], size: int = DEFAULT_TABLE_SIZE) -> tuple[Slot, ...]:
    """The lookup table: slot -> endpoint, ``size`` slots (a prime). The same for the same set
    of endpoints in any order. With more endpoints than slots, the endpoints whose turn never
    comes (the last names) hold no slot (the annotation's check warns of it)."""
    if not is_prime(size):
        raise ValueError(f"Maglev table size {size} is not a prime")
    if not endpoints:
        return ()
    return _table(tuple(endpoints), size)


def lookup_tables(
    cluster: tuple[Slot, ...], local: tuple[Slot, ...], size: int | None
) -> tuple[tuple[Slot, ...], tuple[Slot, ...], str | None]:
    """A Service port's endpoint lists (all, this node's) as the values of their endpoint maps'
    slots: each list of two or more endpoints as its Maglev table of ``size`` slots (None: the
    default); one endpoint stays one slot (nothing to choose). And a warning when a list has more
    endpoints than slots (some would get no traffic)."""
    m = size or DEFAULT_TABLE_SIZE
    most = max(len(cluster), len(local))
    warning = None
    if most > m:
        warning = (
            f"annotation {TABLE_SIZE_ANNOTATION}: {most} endpoints for a Maglev table of {m} slots: "
            f"{most - m} of them get no new connections (a larger prime gives each its share)"
        )
    return (
        table(cluster, m) if len(cluster) > 1 else cluster,
        table(local, m) if len(local) > 1 else local,
        warning,
    )
