"""An in-memory stand-in for the kernel, for fast unit tests (like knftables' Fake).

It applies Transactions op by op with the kernel's rules that matter to nftproxy (missing
objects, duplicate elements with other data, deleting what is still referenced) and is atomic:
a failing transaction leaves the previous state untouched. Real-kernel tests stay the reference.
"""

from __future__ import annotations

import copy
import errno
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from nftproxy.nft.backend import NftError, invalid
from nftproxy.nft.bulk import LoadStep, expand
from nftproxy.nft.diff import create
from nftproxy.nft.listing import CountedElement
from nftproxy.nft.located import errno_of, error, of_errno
from nftproxy.nft.objects import Chain, Counter, DynamicElement, Element, Family, Key, Set, Table, UdpFlow
from nftproxy.nft.transaction import (
    AddChain,
    AddCounter,
    AddElements,
    AddRule,
    AddSet,
    AddTable,
    DeleteChain,
    DeleteCounter,
    DeleteElements,
    DeleteSet,
    DeleteTable,
    FlushChain,
    Op,
    Transaction,
)

_SET_REF = re.compile(r"@([\w.-]+)")
_CHAIN_REF = re.compile(r"\b(?:goto|jump) ([\w.-]+)")
_COUNTER_REF = re.compile(r'\bcounter name "?([\w.-]+)"?')


@dataclass
class _Table:
    comment: str
    chains: dict[str, Chain] = field(default_factory=dict)
    rules: dict[str, list[str]] = field(default_factory=dict)
    sets: dict[str, Set] = field(default_factory=dict)
    elements: dict[str, dict[Key, Element]] = field(default_factory=dict)
    counters: dict[str, Counter] = field(default_factory=dict)
    packets: dict[str, int] = field(default_factory=dict)  # what a test says a named counter counted


class FakeBackend:
    def __init__(self) -> None:
        self.tables: dict[tuple[Family, str], _Table] = {}
        self.transactions: list[Transaction] = []
        self.fail_next: str | None = None  # inject a kernel error into the next apply
        # Fail the next commit at its n-th operation (0-based, over all its transactions), after
        # the ones before it were applied to the working copy: what atomicity must undo.
        self.fail_at_op: int | None = None
        self.loads: list[LoadStep] = []
        # An element the kernel would refuse (its parser or its checks): the message, else None.
        self.refuse: Callable[[Element], str | None] | None = None
        self.checks = 0  # dry runs (check)
        self.timeouts: dict[tuple[Family, str, str, Key], int] = {}  # of the packet path's elements

    def apply(self, *txs: Transaction) -> None:
        self._commit(txs, ())

    def load(self, steps: Iterable[LoadStep]) -> int:
        sent = 0
        for step in steps:
            self._commit(step.txs, [(ld.family, ld.table, ld.set.name, expand(ld)) for ld in step.loads])
            self.loads.append(step)
            sent += step.element_changes()
        return sent

    def check(self, *txs: Transaction) -> None:
        """A dry run: the same checks as a commit, on a copy that is thrown away."""
        self.checks += 1
        if (refused := invalid(txs)) is not None:
            raise refused
        touched = {(tx.family, tx.table) for tx in txs}
        self._run(txs, (), {k: copy.deepcopy(t) if k in touched else t for k, t in self.tables.items()})

    def _commit(self, txs: Iterable[Transaction], loads: Iterable[tuple[Family, str, str, list[Element]]]) -> None:
        """All of it or nothing, like one kernel transaction."""
        txs = list(txs)
        if (refused := invalid(txs)) is not None:
            raise refused
        if self.fail_next:
            msg, self.fail_next = self.fail_next, None
            raise error(msg)  # read as nft's output is: "… No buffer space available" is ENOBUFS
        work = copy.deepcopy(self.tables)
        self._run(txs, loads, work, injected=True)
        self.tables = work
        self.transactions.extend(txs)

    def _run(
        self,
        txs: Iterable[Transaction],
        loads: Iterable[tuple[Family, str, str, list[Element]]],
        work: dict[tuple[Family, str], _Table],
        injected: bool = False,
    ) -> None:
        ops: list[tuple[tuple[Family, str], Op]] = [((tx.family, tx.table), op) for tx in txs for op in tx.ops]
        ops += [((fam, table), AddElements(name, tuple(els))) for fam, table, name, els in loads]
        for i, (key, op) in enumerate(ops):
            if injected and self.fail_at_op == i:
                self.fail_at_op = None
                raise NftError(f"Error: injected failure at operation {i}")
            if self.refuse is not None and isinstance(op, AddElements):
                for e in op.elements:
                    if (why := self.refuse(e)) is not None:
                        where = f"add element {key[0].value} {key[1]} {op.set_name} {{ {e.render()} }}"
                        raise NftError(f"Error: {why} [{where}]", errno_of(f"Error: {why}"))
            _apply_op(work, key, op)

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
            counters={n: Counter(n) for n in t.counters},
        )

    def delete(self, family: Family, table: str) -> bool:
        return self.tables.pop((family, table), None) is not None

    def chain_names(self, family: Family, table: str) -> set[str] | None:
        t = self.tables.get((family, table))
        return set(t.chains) if t else None

    def chain_rules(self, family: Family, table: str) -> dict[str, tuple[str, ...]] | None:
        t = self.tables.get((family, table))
        return {name: tuple(t.rules[name]) for name in t.chains} if t else None

    def packet_path_writes(self, family: Family, table: str, set_name: str, entry: DynamicElement) -> None:
        """What a packet's `update @set { … }` does (tests: a client that got an endpoint)."""
        self.tables[(family, table)].elements[set_name][entry.key] = Element(entry.key, entry.value)
        self.timeouts[(family, table, set_name, entry.key)] = entry.timeout

    def read_dynamic(self, family: Family, table: str, set_name: str) -> list[DynamicElement]:
        els = self.tables[(family, table)].elements.get(set_name)
        if els is None:
            raise of_errno(errno.ENOENT, f"map {set_name}")
        timeouts = self.timeouts
        return [DynamicElement(k, e.value or (), timeouts[(family, table, set_name, k)]) for k, e in els.items()]

    def counter_packets(self, family: Family, table: str) -> dict[str, int]:
        t = self.tables.get((family, table))
        return {n: t.packets.get(n, 0) for n in t.counters} if t else {}

    def counted_elements(self, family: Family, table: str, sets: Iterable[Set]) -> dict[str, list[CountedElement]]:
        """Every element of these sets, counting 0: no packets cross a fake table."""
        t = self.tables.get((family, table))
        if t is None:
            return {}
        return {
            s.name: [CountedElement(e.key, 0, 0, e.comment, e.value) for e in t.elements.get(s.name, {}).values()]
            for s in sets
            if s.name in t.sets
        }

    def dump(self) -> str:
        """Every table as the nft statements that would create it, one line per object, rule and
        element, sorted (tables, then chains, sets and counters by name; rules in their chain's
        order; elements by key): one stable text to compare, as knftables' Fake.Dump()."""
        lines = (line for key in sorted(self.tables) for line in _dump_table(*key, self.tables[key]))
        return "".join(line + "\n" for line in lines)


class FakeConntrack:
    """An in-memory conntrack table (kube-proxy's conntrack.NewFake): the DNATed UDP flows a test
    sets up, one entry each; a deleted flow takes the entries it names (any endpoint port when
    its own is "", as KernelConntrack's)."""

    def __init__(self) -> None:
        self.flows: dict[Family, list[UdpFlow]] = {}
        self.deleted: list[tuple[Family, UdpFlow]] = []  # what the dataplane asked to delete

    def udp_flows(self, family: Family) -> list[UdpFlow]:
        return list(self.flows.get(family, []))

    def delete_udp_flows(self, family: Family, flows: Iterable[UdpFlow]) -> int:
        wanted = set(flows)
        self.deleted += [(family, f) for f in sorted(wanted)]
        have = self.flows.get(family, [])
        kept = [f for f in have if f not in wanted and f._replace(reply_sport="") not in wanted]
        self.flows[family] = kept
        return len(have) - len(kept)


def dump_of(*tables: Table) -> str:
    """The dump (``FakeBackend.dump``) of these desired tables, as a backend holds them once
    created: what a test compares the fake's dump with."""
    fake = FakeBackend()
    for table in tables:
        tx = Transaction(table.family, table.name)
        create(tx, table)
        fake.apply(tx)
    return fake.dump()


def _dump_table(family: Family, name: str, t: _Table) -> Iterator[str]:
    where = f"{family.value} {name}"
    yield AddTable(t.comment).render(where)
    chains = sorted(t.chains)
    sets = sorted(t.sets)
    yield from (AddChain(t.chains[c]).render(where) for c in chains)
    yield from (AddSet(t.sets[s]).render(where) for s in sets)
    yield from (AddCounter(t.counters[c]).render(where) for c in sorted(t.counters))
    for c in chains:
        yield from (AddRule(c, rule).render(where) for rule in t.rules[c])
    for s in sets:
        els = t.elements[s]
        yield from (AddElements(s, (els[k],)).render(where) for k in sorted(els))


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
    if isinstance(op, AddTable):
        tables.setdefault(key, _Table(op.comment))
        return
    if isinstance(op, DeleteTable):
        if tables.pop(key, None) is None:
            raise of_errno(errno.ENOENT, "table")
        return
    t = tables.get(key)
    if t is None:
        raise of_errno(errno.ENOENT, "table")
    match op:
        case AddChain(chain):
            t.chains.setdefault(chain.name, chain)
            t.rules.setdefault(chain.name, [])
        case FlushChain(name):
            _chain(t, name)
            t.rules[name] = []
        case DeleteChain(name):
            _chain(t, name)
            if t.rules[name] or name in _refs(t)[0]:
                raise of_errno(errno.EBUSY, f"chain {name}")
            del t.chains[name], t.rules[name]
        case AddRule(chain, rule):
            _add_rule(t, chain, rule)
        case AddSet(s):
            old = t.sets.get(s.name)
            if old is not None and old.spec != s.spec:
                raise of_errno(errno.EEXIST, f"set {s.name} with another type")
            t.sets.setdefault(s.name, s)
            t.elements.setdefault(s.name, {})
        case DeleteSet(name):
            _set(t, name)
            if name in _refs(t)[1]:
                raise of_errno(errno.EBUSY, f"set {name}")
            del t.sets[name], t.elements[name]
        case AddCounter(counter):
            t.counters.setdefault(counter.name, counter)
        case DeleteCounter(name):
            if name not in t.counters:
                raise of_errno(errno.ENOENT, f"counter {name}")
            if any(name in _COUNTER_REF.findall(r) for rules in t.rules.values() for r in rules):
                raise of_errno(errno.EBUSY, f"counter {name}")
            del t.counters[name]
            t.packets.pop(name, None)
        case AddElements(name, elements):
            _add_elements(t, name, elements)
        case DeleteElements(name, keys):
            els = _set(t, name)
            for k in keys:
                if els.pop(k, None) is None:
                    raise of_errno(errno.ENOENT, f"element {' . '.join(k)}")


def _chain(t: _Table, name: str) -> None:
    if name not in t.chains:
        raise of_errno(errno.ENOENT, f"chain {name}")


def _set(t: _Table, name: str) -> dict[Key, Element]:
    if name not in t.sets:
        raise of_errno(errno.ENOENT, f"set {name}")
    return t.elements[name]


def _add_rule(t: _Table, chain: str, rule: str) -> None:
    _chain(t, chain)
    for c in _CHAIN_REF.findall(rule):
        _chain(t, c)
    for s in _SET_REF.findall(rule):
        _set(t, s)
    for c in _COUNTER_REF.findall(rule):
        if c not in t.counters:
            raise of_errno(errno.ENOENT, f"counter {c}")
    t.rules[chain].append(rule)


def _add_elements(t: _Table, name: str, elements: tuple[Element, ...]) -> None:
    els = _set(t, name)
    for e in elements:
        old = els.get(e.key)
        if old is not None and old != e:
            raise of_errno(errno.EEXIST, f"element {' . '.join(e.key)}")
        for part in e.value or ():
            for c in _CHAIN_REF.findall(part):
                _chain(t, c)
        els[e.key] = e
