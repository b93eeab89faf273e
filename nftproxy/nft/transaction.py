"""A Transaction: an ordered list of operations on one table, rendered as ONE nft script.

One script given to libnftables is one kernel transaction: all of it commits or none of it.

Each kind of operation is a small frozen type that renders its own statement. As knftables'
Transaction, each is checked when it is appended (names nft reads as names, a rule on a chain
this transaction declares, elements of the width of their set, a value on a map's elements and
none on a set's): the first error sticks to the transaction, later operations are dropped, and
a backend raises it (NftError, EINVAL) instead of sending anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter

from nftproxy.nft.objects import Chain, Counter, Element, Family, Key, Set, quote

# Elements per `add element` statement: keeps each statement's parse tree small.
_CHUNK = 5000
# A name nft's scanner reads as one identifier (its `string` token), nothing more.
_NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9_./-]*\Z")


@dataclass(frozen=True, slots=True)
class AddTable:
    comment: str

    def render(self, t: str) -> str:
        return f"add table {t} {{ comment {quote(self.comment)}; }}"


@dataclass(frozen=True, slots=True)
class DeleteTable:
    def render(self, t: str) -> str:
        return f"delete table {t}"


@dataclass(frozen=True, slots=True)
class AddChain:
    chain: Chain

    def render(self, t: str) -> str:
        decl = self.chain.declaration()
        return f"add chain {t} {self.chain.name}" + (f" {{ {decl} }}" if decl else "")


@dataclass(frozen=True, slots=True)
class FlushChain:
    name: str

    def render(self, t: str) -> str:
        return f"flush chain {t} {self.name}"


@dataclass(frozen=True, slots=True)
class DeleteChain:
    name: str

    def render(self, t: str) -> str:
        return f"delete chain {t} {self.name}"


@dataclass(frozen=True, slots=True)
class AddRule:
    chain: str
    rule: str

    def render(self, t: str) -> str:
        return f"add rule {t} {self.chain} {self.rule}"


@dataclass(frozen=True, slots=True)
class AddSet:
    set: Set

    def render(self, t: str) -> str:
        return f"add {self.set.keyword} {t} {self.set.name} {{ {self.set.declaration()} }}"


@dataclass(frozen=True, slots=True)
class DeleteSet:
    name: str
    is_map: bool

    def render(self, t: str) -> str:
        return f"delete {'map' if self.is_map else 'set'} {t} {self.name}"


@dataclass(frozen=True, slots=True)
class AddCounter:
    counter: Counter

    def render(self, t: str) -> str:
        decl = self.counter.declaration()
        return f"add counter {t} {self.counter.name}" + (f" {{ {decl} }}" if decl else "")


@dataclass(frozen=True, slots=True)
class DeleteCounter:
    name: str

    def render(self, t: str) -> str:
        return f"delete counter {t} {self.name}"


@dataclass(frozen=True, slots=True)
class AddElements:
    set_name: str
    elements: tuple[Element, ...]

    def render(self, t: str) -> str:
        return f"add element {t} {self.set_name} {{ {', '.join(e.render() for e in self.elements)} }}"


@dataclass(frozen=True, slots=True)
class DeleteElements:
    set_name: str
    keys: tuple[Key, ...]

    def render(self, t: str) -> str:
        return f"delete element {t} {self.set_name} {{ {', '.join(' . '.join(k) for k in self.keys)} }}"


Op = (
    AddTable
    | DeleteTable
    | AddChain
    | FlushChain
    | DeleteChain
    | AddRule
    | AddSet
    | DeleteSet
    | AddCounter
    | DeleteCounter
    | AddElements
    | DeleteElements
)
ElementOp = AddElements | DeleteElements

_key = itemgetter(0)
_value = itemgetter(1)


@dataclass
class Transaction:
    family: Family
    table: str
    ops: list[Op] = field(default_factory=list, init=False)
    # the declarations of the sets whose elements it changes, when known (the compiler's delta):
    # a backend may then send the elements packed, by netlink, instead of as a script; elements
    # appended after their set is known here are checked against its declaration
    sets: dict[str, Set] = field(default_factory=dict, compare=False, repr=False)
    # the first operation that could not be appended, and why; the backends raise it
    error: str | None = field(default=None, init=False, compare=False)
    _chains: set[str] = field(default_factory=set, init=False, compare=False, repr=False)
    _declared: dict[str, Set] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.table):
            self.error = f"Error: invalid table name {self.table!r} [{self.family.value} {self.table}]"

    # -- building -------------------------------------------------------------------------
    def add_table(self, comment: str) -> None:
        self._append(AddTable(comment), None)

    def delete_table(self) -> None:
        self._append(DeleteTable(), None)

    def add_chain(self, chain: Chain) -> None:
        if self._append(AddChain(chain), _name(chain.name, "chain")):
            self._chains.add(chain.name)

    def flush_chain(self, name: str) -> None:
        self._append(FlushChain(name), _name(name, "chain"))

    def delete_chain(self, name: str) -> None:
        self._append(DeleteChain(name), _name(name, "chain"))

    def add_rule(self, chain: str, rule: str) -> None:
        why = _name(chain, "chain") or _rule(rule)
        if why is None and chain not in self._chains:
            why = f"chain {chain} is not declared in this transaction (a chain's rules come with it)"
        self._append(AddRule(chain, rule), why)

    def add_set(self, s: Set) -> None:
        why = _name(s.name, s.keyword)
        if why is None and not s.spec.startswith(("type ", "typeof ")):
            why = f"{s.keyword} {s.name} has no type: {s.spec!r}"
        if self._append(AddSet(s), why):
            self._declared[s.name] = s

    def delete_set(self, name: str, is_map: bool) -> None:
        self._append(DeleteSet(name, is_map), _name(name, "map" if is_map else "set"))

    def add_counter(self, c: Counter) -> None:
        self._append(AddCounter(c), _name(c.name, "counter"))

    def delete_counter(self, name: str) -> None:
        self._append(DeleteCounter(name), _name(name, "counter"))

    def add_elements(self, set_name: str, elements: Iterable[Element]) -> None:
        els = tuple(elements)
        if not els:
            return
        why = _name(set_name, "set") or self._check_elements(set_name, els)
        for i in range(0, len(els), _CHUNK):
            if not self._append(AddElements(set_name, els[i : i + _CHUNK]), why):
                return

    def delete_elements(self, set_name: str, keys: Iterable[Key]) -> None:
        ks = tuple(keys)
        if not ks:
            return
        why = _name(set_name, "set") or self._check_keys(set_name, set(map(len, ks)))
        for i in range(0, len(ks), _CHUNK):
            if not self._append(DeleteElements(set_name, ks[i : i + _CHUNK]), why):
                return

    def _append(self, op: Op, why: str | None) -> bool:
        """Append ``op`` unless this transaction already has an error or ``op`` is invalid (then
        that is its error, with the statement): the first error sticks, as knftables'."""
        if self.error is not None:
            return False
        if why is not None:
            statement = op.render(f"{self.family.value} {self.table}")
            self.error = f"Error: invalid operation: {why} [{_short(statement)}]"
            return False
        self.ops.append(op)
        return True

    def _declaration(self, set_name: str) -> Set | None:
        return self._declared.get(set_name) or self.sets.get(set_name)

    def _check_keys(self, set_name: str, widths: set[int]) -> str | None:
        """``widths``: the numbers of parts of the keys."""
        s = self._declaration(set_name)
        if s is not None:
            width = s.key_width
            return None if widths == {width} else f"{s.keyword} {set_name} has keys of {width} parts, not {widths}"
        return None if len(widths) == 1 and 0 not in widths else f"keys of {sorted(widths)} parts in one set"

    def _check_elements(self, set_name: str, els: tuple[Element, ...]) -> str | None:
        # builtins over the whole tuple (~70 ns an element): a delta may carry 10^5 of them
        if why := self._check_keys(set_name, set(map(len, map(_key, els)))):
            return why
        values = list(map(_value, els))
        bare = values.count(None)
        s = self._declaration(set_name)
        if s is not None and not s.is_map:
            return None if bare == len(values) else f"set {set_name} has no values: an element has one"
        if s is not None:
            if bare:
                return f"map {set_name} needs a value for each element"
            widths = set(map(len, values))
            width = s.value_width
            return None if widths == {width} else f"map {set_name} has values of {width} parts, not {widths}"
        if bare and bare != len(values):
            return "elements with and without a value in one set"
        return None

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def element_changes(self) -> int:
        n = 0
        for op in self.ops:
            if isinstance(op, AddElements):
                n += len(op.elements)
            elif isinstance(op, DeleteElements):
                n += len(op.keys)
        return n

    def render(self) -> str:
        """The script (an invalid transaction's error follows as a comment, as knftables' String)."""
        t = f"{self.family.value} {self.table}"
        text = "".join(op.render(t) + "\n" for op in self.ops)
        return text + f"# {self.error}\n" if self.error is not None else text


def _name(name: str, what: str) -> str | None:
    return None if _NAME.match(name) else f"invalid {what} name {name!r}"


def _rule(rule: str) -> str | None:
    if not rule.strip():
        return "an empty rule"
    return "a rule of several lines" if "\n" in rule else None


def _short(statement: str) -> str:
    return statement if len(statement) <= 200 else statement[:200] + " …"
