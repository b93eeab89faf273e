"""A Transaction checks each operation when it is appended (as knftables'): the first error
sticks, later operations are dropped, and a backend raises it (EINVAL) without sending anything.
The rendered text of valid operations is the golden files' (tests/golden)."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from nftproxy.nft.backend import NftError
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Chain, Counter, Element, Family, Hook, Set
from nftproxy.nft.transaction import AddElements, DeleteElements, Transaction

SVC = Set("svc", "typeof ip daddr . meta l4proto . th dport : verdict")
IPS = Set("ips", "typeof ip daddr")
EPS = Set("eps", "typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport")


def _declared() -> Transaction:
    tx = Transaction(Family.IP, "t")
    tx.add_table("c")
    for s in (SVC, IPS, EPS):
        tx.add_set(s)
    tx.add_chain(Chain("c1"))
    return tx


def test_every_kind_of_operation_renders_its_statement() -> None:
    tx = _declared()
    tx.add_chain(Chain("base", hook=Hook("nat", "prerouting", -100, "why")))
    tx.add_rule("c1", 'ip daddr @ips counter comment "x"')
    tx.add_counter(Counter("n", "packets"))
    tx.add_elements("svc", [Element(("10.0.0.1", "tcp", "80"), ("goto c1",), "default/a")])
    tx.add_elements("eps", [Element(("10.0.0.1", "tcp", "80", "0"), ("10.244.0.1", "8080"))])
    tx.delete_elements("ips", [("10.0.0.2",), ("10.0.0.3",)])
    tx.flush_chain("c1")
    tx.delete_chain("c1")
    tx.delete_set("svc", is_map=True)
    tx.delete_set("ips", is_map=False)
    tx.delete_counter("n")
    tx.delete_table()
    assert tx.error is None
    assert tx.render().splitlines() == [
        'add table ip t { comment "c"; }',
        "add map ip t svc { typeof ip daddr . meta l4proto . th dport : verdict; }",
        "add set ip t ips { typeof ip daddr; }",
        "add map ip t eps { typeof ip daddr . meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport; }",
        "add chain ip t c1",
        'add chain ip t base { type nat hook prerouting priority -100; policy accept; comment "why"; }',
        'add rule ip t c1 ip daddr @ips counter comment "x"',
        'add counter ip t n { comment "packets"; }',
        'add element ip t svc { 10.0.0.1 . tcp . 80 comment "default/a" : goto c1 }',
        "add element ip t eps { 10.0.0.1 . tcp . 80 . 0 : 10.244.0.1 . 8080 }",
        "delete element ip t ips { 10.0.0.2, 10.0.0.3 }",
        "flush chain ip t c1",
        "delete chain ip t c1",
        "delete map ip t svc",
        "delete set ip t ips",
        "delete counter ip t n",
        "delete table ip t",
    ]
    assert len(tx) == 17 and tx.element_changes() == 4


INVALID: dict[str, tuple[Callable[[Transaction], None], str]] = {
    "a key of another width": (
        lambda tx: tx.add_elements("svc", [Element(("10.0.0.1", "tcp"), ("goto c1",))]),
        "map svc has keys of 3 parts, not {2} [add element ip t svc { 10.0.0.1 . tcp : goto c1 }]",
    ),
    "a value on a set's element": (
        lambda tx: tx.add_elements("ips", [Element(("10.0.0.1",), ("accept",))]),
        "set ips has no values: an element has one",
    ),
    "no value on a map's element": (
        lambda tx: tx.add_elements("svc", [Element(("10.0.0.1", "tcp", "80"))]),
        "map svc needs a value for each element",
    ),
    "a value of another width": (
        lambda tx: tx.add_elements("eps", [Element(("10.0.0.1", "tcp", "80", "0"), ("10.244.0.1",))]),
        "map eps has values of 2 parts, not {1}",
    ),
    "a deleted key of another width": (
        lambda tx: tx.delete_elements("ips", [("10.0.0.1", "tcp")]),
        "set ips has keys of 1 parts, not {2}",
    ),
    "a rule on a chain not declared here": (
        lambda tx: tx.add_rule("elsewhere", "accept"),
        "chain elsewhere is not declared in this transaction",
    ),
    "a rule of two statements": (
        lambda tx: tx.add_rule("c1", "accept\nflush ruleset"),
        "a rule of several lines",
    ),
    "a name that is not one": (
        lambda tx: tx.add_chain(Chain("c; flush ruleset")),
        "invalid chain name 'c; flush ruleset'",
    ),
    "an empty name": (lambda tx: tx.delete_set("", is_map=False), "invalid set name ''"),
    "a set without a type": (lambda tx: tx.add_set(Set("s", "ipv4_addr")), "set s has no type"),
    "elements of two widths in an unknown set": (
        lambda tx: tx.add_elements("other", [Element(("a",)), Element(("a", "b"))]),
        "keys of [1, 2] parts in one set",
    ),
    "elements with and without a value in an unknown set": (
        lambda tx: tx.add_elements("other", [Element(("a",)), Element(("b",), ("accept",))]),
        "elements with and without a value in one set",
    ),
}


@pytest.mark.parametrize("case", INVALID)
def test_an_invalid_operation_is_refused_when_appended(case: str) -> None:
    append, why = INVALID[case]
    tx = _declared()
    before = len(tx)
    append(tx)
    assert tx.error is not None and why in tx.error, tx.error
    assert tx.error.startswith("Error: invalid operation: ")
    assert len(tx) == before, "the invalid operation is not in the transaction"


def test_the_first_error_sticks_and_later_operations_are_dropped() -> None:
    tx = _declared()
    tx.add_elements("ips", [Element(("10.0.0.1", "tcp"))])
    first = tx.error
    tx.add_rule("nowhere", "accept")
    tx.add_elements("ips", [Element(("10.0.0.2",))])  # valid, but after the error
    assert tx.error == first
    assert not any(isinstance(op, AddElements | DeleteElements) for op in tx.ops)
    assert tx.render().endswith(f"# {first}\n")


def test_the_backends_raise_the_error_and_send_nothing() -> None:
    fake = FakeBackend()
    good = _declared()
    bad = Transaction(Family.IP, "t")
    bad.sets["ips"] = IPS
    bad.add_elements("ips", [Element(("10.0.0.1",), ("accept",))])
    with pytest.raises(NftError) as refused:
        fake.apply(good, bad)
    assert refused.value.errno == errno.EINVAL and "[add element ip t ips { 10.0.0.1 : accept }]" in str(refused.value)
    assert fake.tables == {} and fake.transactions == [], "nothing of either transaction"
    with pytest.raises(NftError):
        fake.check(bad)
    kernel = KernelBackend()  # refused before its worker thread starts: no nft, no kernel
    try:
        with pytest.raises(NftError) as refused:
            kernel.apply(good, bad)
        assert refused.value.errno == errno.EINVAL
        with pytest.raises(NftError):
            kernel.check(bad)
    finally:
        kernel.close()


def test_elements_are_checked_against_the_declarations_a_delta_carries() -> None:
    """The compiler's delta names its sets' declarations (``tx.sets``) before its elements."""
    tx = Transaction(Family.IP, "t")
    tx.sets["svc"] = SVC
    tx.add_elements("svc", [Element(("10.0.0.1", "tcp", "80"), ("goto c1",))])
    assert tx.error is None
    tx.add_elements("svc", [Element(("10.0.0.1", "tcp", "80", "0"), ("goto c1",))])
    assert tx.error is not None and "map svc has keys of 3 parts" in tx.error


def test_an_invalid_table_name_refuses_the_whole_transaction() -> None:
    tx = Transaction(Family.IP, "t { }")
    tx.add_table("c")
    assert len(tx) == 0 and tx.error is not None and "invalid table name" in tx.error
