"""A big first load as a sequence of steps, each committed after the one before.

A step is transactions (declarations, rules, elements nft must parse) and element loads (a set's
elements, or "spreads": elements ``key . i : values[i]`` for i = 0, 1, … given as one key and
its N values). A backend commits each step in order; the kernel backend packs element loads
into nfnetlink batches and commits a step while the caller prepares the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from nftproxy.nft.objects import Element, Family, Set, Spread
from nftproxy.nft.transaction import Transaction


class ElementLoad(NamedTuple):
    family: Family
    table: str
    set: Set
    elements: Sequence[Element] = ()
    spreads: Sequence[Spread] = ()

    def size(self) -> int:
        return len(self.elements) + sum(len(v) for _, v in self.spreads)


class LoadStep(NamedTuple):
    txs: list[Transaction]
    loads: list[ElementLoad]

    def element_changes(self) -> int:
        return sum(tx.element_changes() for tx in self.txs) + sum(ld.size() for ld in self.loads)


def expand(load: ElementLoad) -> list[Element]:
    """An element load as plain elements (for backends without a packed path)."""
    out = list(load.elements)
    for key, values in load.spreads:
        out += [Element((*key, str(i)), v) for i, v in enumerate(values)]
    return out
