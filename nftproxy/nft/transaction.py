"""A Transaction: an ordered list of operations on one table, rendered as ONE nft script.

One script given to libnftables is one kernel transaction: all of it commits or none of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nftproxy.nft.objects import Chain, Counter, Element, Family, Key, Set, quote

# Elements per `add element` statement: keeps each statement's parse tree small.
_CHUNK = 5000


@dataclass(frozen=True)
class Op:
    verb: str  # add | flush | delete
    what: str  # table | chain | set | map | counter | rule | elements
    name: str = ""  # chain or set name
    chain: Chain | None = None
    set: Set | None = None
    rule: str = ""
    elements: tuple[Element, ...] = ()
    keys: tuple[Key, ...] = ()
    comment: str = ""
    counter: Counter | None = None


@dataclass
class Transaction:
    family: Family
    table: str
    ops: list[Op] = field(default_factory=list)
    # the declarations of the sets whose elements it changes, when known (the compiler's delta):
    # a backend may then send the elements packed, by netlink, instead of as a script
    sets: dict[str, Set] = field(default_factory=dict, compare=False, repr=False)

    # -- building -------------------------------------------------------------------------
    def add_table(self, comment: str) -> None:
        self.ops.append(Op("add", "table", comment=comment))

    def delete_table(self) -> None:
        self.ops.append(Op("delete", "table"))

    def add_chain(self, chain: Chain) -> None:
        self.ops.append(Op("add", "chain", chain.name, chain=chain))

    def flush_chain(self, name: str) -> None:
        self.ops.append(Op("flush", "chain", name))

    def delete_chain(self, name: str) -> None:
        self.ops.append(Op("delete", "chain", name))

    def add_rule(self, chain: str, rule: str) -> None:
        self.ops.append(Op("add", "rule", chain, rule=rule))

    def add_set(self, s: Set) -> None:
        self.ops.append(Op("add", "set", s.name, set=s))

    def delete_set(self, name: str, is_map: bool) -> None:
        self.ops.append(Op("delete", "map" if is_map else "set", name))

    def add_counter(self, c: Counter) -> None:
        self.ops.append(Op("add", "counter", c.name, counter=c))

    def delete_counter(self, name: str) -> None:
        self.ops.append(Op("delete", "counter", name))

    def add_elements(self, set_name: str, elements: Iterable[Element]) -> None:
        els = tuple(elements)
        for i in range(0, len(els), _CHUNK):
            self.ops.append(Op("add", "elements", set_name, elements=els[i : i + _CHUNK]))

    def delete_elements(self, set_name: str, keys: Iterable[Key]) -> None:
        ks = tuple(keys)
        for i in range(0, len(ks), _CHUNK):
            self.ops.append(Op("delete", "elements", set_name, keys=ks[i : i + _CHUNK]))

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def element_changes(self) -> int:
        return sum(len(op.elements) + len(op.keys) for op in self.ops if op.what == "elements")

    def render(self) -> str:
        return "".join(self._render(op) + "\n" for op in self.ops)

    def _render(self, op: Op) -> str:
        t = f"{self.family.value} {self.table}"
        if op.what == "table":
            if op.verb == "add":
                return f"add table {t} {{ comment {quote(op.comment)}; }}"
            return f"{op.verb} table {t}"
        if op.what == "chain":
            if op.verb == "add" and op.chain is not None:
                decl = op.chain.declaration()
                return f"add chain {t} {op.name}" + (f" {{ {decl} }}" if decl else "")
            return f"{op.verb} chain {t} {op.name}"
        if op.what == "rule":
            return f"add rule {t} {op.name} {op.rule}"
        if op.what == "set" and op.set is not None:
            return f"add {op.set.keyword} {t} {op.name} {{ {op.set.declaration()} }}"
        if op.what == "counter":
            decl = op.counter.declaration() if op.counter is not None else ""
            return f"{op.verb} counter {t} {op.name}" + (f" {{ {decl} }}" if decl else "")
        if op.what in ("set", "map"):
            return f"{op.verb} {op.what} {t} {op.name}"
        if op.verb == "add":
            body = ", ".join(e.render() for e in op.elements)
        else:
            body = ", ".join(" . ".join(k) for k in op.keys)
        return f"{op.verb} element {t} {op.name} {{ {body} }}"
