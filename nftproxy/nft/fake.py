"""An in-memory stand-in for the kernel, for fast unit tests (like knftables' Fake).

It applies Transactions op by op with the kernel's rules that matter to nftproxy (missing
objects, duplicate elements with other data, deleting what is still referenced) and is atomic:
a failing transaction leaves the previous state untouched. Real-kernel tests stay the reference.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from nftproxy.nft.kernel import NftError
from nftproxy.nft.objects import Chain, Element, Family, Key, Set, Table
from nftproxy.nft.transaction import Op, Transaction

_SET_REF = re.compile(r"@([\w.-]+)")
_CHAIN_REF = re.compile(r"\b(?:goto|jump) ([\w.-]+)")


@dataclass
class _Table:
    comment: str
    chains: dict[str, Chain] = field(default_factory=dict)
    rules: dict[str, list[str]] = field(default_factory=dict)
    sets: dict[str, Set] = field(default_factory=dict)
    elements: dict[str, dict[Key, Element]] = field(default_factory=dict)


class FakeBackend:
    def __init__(self) -> None:
        self.tables: dict[tuple[Family, str], _Table] = {}
        self.transactions: list[Transaction] = []
        self.fail_next: str | None = None  # inject a kernel error into the next apply
        self.conntrack_cleared: list[tuple[Family, str, str, str]] = []

    def apply(self, *txs: Transaction) -> None:
        if self.fail_next:
            msg, self.fail_next = self.fail_next, None
            raise NftError(msg)
        work = copy.deepcopy(self.tables)
        for tx in txs:
            for op in tx.ops:
                _apply_op(work, (tx.family, tx.table), op)
        self.tables = work
        self.transactions.extend(txs)

    def read(self, family: Family, table: str) -> Table | None:
        t = self.tables.get((family, table))
        if t is None:
            return None
        return Table(
            family,
            table,
            t.comment,
            {n: Chain(n) for n in t.chains},
            {n: Set(n, spec=s.spec) for n, s in t.sets.items()},
            {n: dict(e) for n, e in t.elements.items()},
            adopted=True,
        )

    def delete(self, family: Family, table: str) -> bool:
        return self.tables.pop((family, table), None) is not None

    def chain_names(self, family: Family, table: str) -> set[str] | None:
        t = self.tables.get((family, table))
        return set(t.chains) if t else None

    def read_elements(self, family: Family, table: str, set_name: str) -> dict[Key, Element]:
        return dict(self.tables[(family, table)].elements[set_name])

    def clear_udp_conntrack(self, family: Family, entries: list[tuple[str, str, str]]) -> None:
        self.conntrack_cleared.extend((family, *e) for e in entries)


def _refs(t: _Table) -> tuple[set[str], set[str]]:
    chains: set[str] = set()
    sets: set[str] = set()
    for rules in t.rules.values():
        for r in rules:
            chains.update(_CHAIN_REF.findall(r))
            sets.update(_SET_REF.findall(r))
    for els in t.elements.values():
        for e in els.values():
            for part in e.value or ():
                chains.update(_CHAIN_REF.findall(part))
    return chains, sets


def _apply_op(tables: dict[tuple[Family, str], _Table], key: tuple[Family, str], op: Op) -> None:
    if op.what == "table":
        if op.verb == "add":
            tables.setdefault(key, _Table(op.comment))
        elif tables.pop(key, None) is None:
            raise NftError("Error: No such file or directory (table)")
        return
    t = tables.get(key)
    if t is None:
        raise NftError("Error: No such file or directory (table)")
    if op.what == "chain":
        _chain_op(t, op)
    elif op.what == "rule":
        if op.name not in t.chains:
            raise NftError(f"Error: No such file or directory (chain {op.name})")
        for c in _CHAIN_REF.findall(op.rule):
            if c not in t.chains:
                raise NftError(f"Error: No such file or directory (chain {c})")
        for s in _SET_REF.findall(op.rule):
            if s not in t.sets:
                raise NftError(f"Error: No such file or directory (set {s})")
        t.rules[op.name].append(op.rule)
    elif op.what in ("set", "map"):
        _set_op(t, op)
    else:
        _elements_op(t, op)


def _chain_op(t: _Table, op: Op) -> None:
    if op.verb == "add" and op.chain is not None:
        t.chains.setdefault(op.name, op.chain)
        t.rules.setdefault(op.name, [])
        return
    if op.name not in t.chains:
        raise NftError(f"Error: No such file or directory (chain {op.name})")
    if op.verb == "flush":
        t.rules[op.name] = []
        return
    if t.rules[op.name] or op.name in _refs(t)[0]:
        raise NftError(f"Error: Device or resource busy (chain {op.name})")
    del t.chains[op.name], t.rules[op.name]


def _set_op(t: _Table, op: Op) -> None:
    if op.verb == "add" and op.set is not None:
        old = t.sets.get(op.name)
        if old is not None and old.spec != op.set.spec:
            raise NftError(f"Error: File exists (set {op.name} with another type)")
        t.sets.setdefault(op.name, op.set)
        t.elements.setdefault(op.name, {})
        return
    if op.name not in t.sets:
        raise NftError(f"Error: No such file or directory (set {op.name})")
    if op.name in _refs(t)[1]:
        raise NftError(f"Error: Device or resource busy (set {op.name})")
    del t.sets[op.name], t.elements[op.name]


def _elements_op(t: _Table, op: Op) -> None:
    if op.name not in t.sets:
        raise NftError(f"Error: No such file or directory (set {op.name})")
    els = t.elements[op.name]
    if op.verb == "delete":
        for k in op.keys:
            if els.pop(k, None) is None:
                raise NftError(f"Error: No such file or directory (element {' . '.join(k)})")
        return
    for e in op.elements:
        old = els.get(e.key)
        if old is not None and old != e:
            raise NftError(f"Error: File exists (element {' . '.join(e.key)})")
        for part in e.value or ():
            for c in _CHAIN_REF.findall(part):
                if c not in t.chains:
                    raise NftError(f"Error: No such file or directory (chain {c})")
        els[e.key] = e
