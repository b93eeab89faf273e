"""A read-only view of one nftproxy table: chain rules (as text) and set/map elements.

Built either from the kernel (``read_view``: `nft -j list table` for the elements, a terse text
listing for the rules) or from a compiled Table (``view_of``, for golden tests). ``explain`` and
``trace`` only read through this view; nothing here writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nftproxy.nft.backend import Backend
from nftproxy.nft.objects import Element, Family, Key, Table


@dataclass(frozen=True)
class TableView:
    family: Family
    name: str
    chains: Mapping[str, tuple[str, ...]]  # chain name -> rules, in order (text)
    elements: Mapping[str, Mapping[Key, Element]]  # set/map name -> key -> element

    def els(self, set_name: str) -> Mapping[Key, Element]:
        return self.elements.get(set_name, {})

    def keys(self, set_name: str) -> list[Key]:
        return list(self.els(set_name))


def view_of(table: Table) -> TableView:
    """The view of a compiled (desired) table."""
    return TableView(
        table.family,
        table.name,
        {name: tuple(c.rules) for name, c in table.chains.items()},
        {name: dict(els) for name, els in table.elements.items()},
    )


def read_view(backend: Backend, family: Family, table: str) -> TableView | None:
    """The kernel's table (None: it does not exist)."""
    t = backend.read(family, table)
    rules = backend.chain_rules(family, table) if t is not None else None
    if t is None or rules is None:
        return None
    return TableView(family, table, rules, {name: dict(els) for name, els in t.elements.items()})


def normalize(rule: str) -> str:
    """A rule as the kernel lists it and as we write it compare equal (hex marks are padded)."""
    return re.sub(r"0x0*([0-9a-f]+)", r"0x\1", rule)
