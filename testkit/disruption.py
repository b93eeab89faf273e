"""How many clients a change of endpoints moves, predicted from what the table holds (used by
tests/netns/test_maglev.py and bench/maglev.py, which measure it).

* a slot table (maglev, compiler/maglev.py): the share of slots whose endpoint changed, clients
  spread evenly over the slots by the kernel's hash;
* source-hash: nftables' ``jhash … mod N`` is ``hash * N >> 32`` (nft_jhash's reciprocal_scale),
  N equal ranges of the hash, slot i -> the i-th endpoint in the compiler's order (addresses
  sorted as text): the share of the hash range whose endpoint changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction


def slots_moved(before: Sequence[object], after: Sequence[object]) -> float:
    """The share of a table's slots whose endpoint changed (the two tables of one size)."""
    assert len(before) == len(after), (len(before), len(after))
    return sum(x != y for x, y in zip(before, after, strict=True)) / len(before)


def source_hash_moved(before: Sequence[str], after: Sequence[str]) -> float:
    """The share of clients source-hash moves from endpoints ``before`` to ``after`` (addresses)."""
    old, new = sorted(before), sorted(after)
    n, m = len(old), len(new)
    cuts = sorted({Fraction(i, n) for i in range(n + 1)} | {Fraction(j, m) for j in range(m + 1)})
    moved = Fraction(0)
    for lo, hi in itertools.pairwise(cuts):
        mid = (lo + hi) / 2
        if old[int(mid * n)] != new[int(mid * m)]:
            moved += hi - lo
    return float(moved)
