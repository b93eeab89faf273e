"""Plan the one transaction that turns the applied table into the desired one."""

from __future__ import annotations

from nftproxy.nft.objects import Element, Key, Table
from nftproxy.nft.transaction import Transaction


def plan(applied: Table | None, desired: Table) -> Transaction:
    """Return the smallest transaction making ``applied`` (None: absent) equal to ``desired``.

    Order matters inside one transaction: objects are declared before anything points at them,
    and references are removed before what they point at is deleted. Chains are compared by name
    only: same table comment (a digest of every rule template) and same name means same rules,
    and anything else is rebuilt whole (``_needs_recreate``).
    """
    tx = Transaction(desired.family, desired.name)
    if applied is None:
        create(tx, desired)
        return tx
    if _needs_recreate(applied, desired):
        tx.delete_table()
        create(tx, desired)
        return tx

    new_sets = [s for name, s in desired.sets.items() if name not in applied.sets]
    new_chains = [c for name, c in desired.chains.items() if name not in applied.chains]
    stale_chains = [name for name in applied.chains if name not in desired.chains]
    stale_sets = [s for name, s in applied.sets.items() if name not in desired.sets]
    new_counters = [c for name, c in desired.counters.items() if name not in applied.counters]
    stale_counters = [name for name in applied.counters if name not in desired.counters]

    adds: list[tuple[str, list[Element]]] = []
    deletes: list[tuple[str, list[Key]]] = []
    for name, s in desired.sets.items():
        if s.dynamic:
            continue
        want = desired.elements.get(name, {})
        have = applied.elements.get(name, {})
        gone = [k for k, e in have.items() if want.get(k) != e]
        new = [e for k, e in want.items() if have.get(k) != e]
        if gone:
            deletes.append((name, gone))
        if new:
            adds.append((name, new))

    for s in new_sets:
        tx.add_set(s)
    for counter in new_counters:
        tx.add_counter(counter)
    for c in new_chains:
        tx.add_chain(c)
    for name, keys in deletes:
        tx.delete_elements(name, keys)
    for name in stale_chains:
        tx.flush_chain(name)
    for c in new_chains:
        for rule in c.rules:
            tx.add_rule(c.name, rule)
    for name, els in adds:
        tx.add_elements(name, els)
    for s in stale_sets:
        tx.delete_set(s.name, s.is_map)
    for name in stale_chains:
        tx.delete_chain(name)
    for name in stale_counters:  # after the rules counting into them
        tx.delete_counter(name)
    return tx


def create(tx: Transaction, desired: Table, skip_elements: frozenset[str] = frozenset()) -> None:
    """Declare the whole table: sets, counters and chains first, then rules, then elements
    (except those of ``skip_elements``, which the caller loads another way)."""
    tx.add_table(desired.comment)
    for s in desired.sets.values():
        tx.add_set(s)
    for counter in desired.counters.values():
        tx.add_counter(counter)
    for c in desired.chains.values():
        tx.add_chain(c)
    for c in desired.chains.values():
        for rule in c.rules:
            tx.add_rule(c.name, rule)
    for name, els in desired.elements.items():
        if els and not desired.sets[name].dynamic and name not in skip_elements:
            tx.add_elements(name, els.values())


def _needs_recreate(applied: Table, desired: Table) -> bool:
    """A different layout (table comment) or a re-declared set/base chain: rebuild atomically.

    The table comment carries a digest of every rule template: same comment and same chain name
    means same rules, so an adopted table's chains are trusted by name. (nft 1.0.6 also cannot add
    a rule binding an existing ``typeof … th dport`` map: such rules are only ever created together
    with their map, which a rebuild does.)
    """
    if applied.comment != desired.comment:
        return True
    if applied.adopted:
        return False
    for name, s in desired.sets.items():
        if name in applied.sets and applied.sets[name] != s:
            return True
    for name, c in desired.chains.items():
        old = applied.chains.get(name)
        if old is not None and old.hook != c.hook:
            return True
    return False
