"""The fake backend is atomic like the kernel, and the first bulk load runs on it too (in
chunks, the dispatch maps last; rolled back when a later step fails)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import replace

import pytest

from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.backend import NftError
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Chain, Element, Family, Set
from nftproxy.nft.transaction import AddElements, Transaction
from tests.support.builders import CFG, eps, expected_dump, svc


def _tx(*elements: str) -> Transaction:
    tx = Transaction(Family.IP, "t")
    tx.add_elements("s", [Element((e,)) for e in elements])
    return tx


def test_a_commit_failing_half_way_changes_nothing() -> None:
    fake = FakeBackend()
    create = Transaction(Family.IP, "t")
    create.add_table("c")
    create.add_set(Set("s", "type ipv4_addr"))
    fake.apply(create, _tx("10.0.0.1"))
    before = copy.deepcopy(fake.tables)
    fake.fail_at_op = 2  # the second transaction's second element op, after three were applied
    second = _tx("10.0.0.3")
    second.add_elements("s", [Element(("10.0.0.4",))])
    with pytest.raises(NftError, match="operation 2"):
        fake.apply(_tx("10.0.0.2"), second)
    assert fake.tables == before  # nothing of the first transaction or the first op stayed
    assert ("10.0.0.2",) not in fake.tables[(Family.IP, "t")].elements["s"]


def _loaded(n: int) -> tuple[Dataplane, FakeBackend]:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.bulk_elements, dp.stream_services, dp.stream_chunks = 1, 1, 3
    for i in range(n):
        dp.inputs.set_service(svc(i, node_port=i % 2 == 0))
        dp.inputs.set_slice(eps(i, 1 + i % 4))
    return dp, fake


def test_first_bulk_load_in_chunks_equals_the_full_compile() -> None:
    dp, fake = _loaded(12)
    result = dp.sync()
    assert result.full and dp.batched > 0
    assert fake.dump() == expected_dump(dp)
    assert len(fake.loads) == 4  # 3 chunks, then every other element
    dispatch = {"service-ips", "service-nodeports", "no-endpoint-services", "no-endpoint-nodeports"}
    for step in fake.loads[:-1]:  # until the last step, no Service is reachable
        assert not {ld.set.name for ld in step.loads} & dispatch
        assert not any(isinstance(op, AddElements) and op.set_name in dispatch for tx in step.txs for op in tx.ops)
    assert {ld.set.name for ld in fake.loads[-1].loads} >= {"service-ips", "service-nodeports"}
    assert dp.sync().operations == 0  # and then a partial sync has nothing to send


class _FailingStep(FakeBackend):
    """Refuses the n-th step of a load (the earlier ones were committed)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def load(self, steps: Iterable[LoadStep]) -> int:
        def failing() -> Iterable[LoadStep]:
            for i, step in enumerate(steps):
                if i == self.n:
                    self.fail_next = "Error: injected at a later step"
                yield step

        return super().load(failing())


def test_a_failed_first_load_is_rolled_back() -> None:
    fake = _FailingStep(2)
    dp = Dataplane(fake, CFG)
    dp.bulk_elements, dp.stream_services, dp.stream_chunks = 1, 1, 3
    for i in range(9):
        dp.inputs.set_service(svc(i))
        dp.inputs.set_slice(eps(i, 2))
    with pytest.raises(NftError, match="rolled back: no nftproxy table, as before"):
        dp.sync()
    assert fake.tables == {}  # the declarations of the first two steps are gone again
    fake.n = -1
    assert dp.sync().full
    assert fake.read(Family.IP, "nftproxy") is not None


def _top_up_load(top_up: Callable[[Dataplane], None]) -> tuple[Dataplane, FakeBackend, Callable[[], None]]:
    dp, fake = _loaded(9)
    return dp, fake, lambda: top_up(dp)


def _matches_full_compile(dp: Dataplane, fake: FakeBackend) -> None:
    assert fake.dump() == expected_dump(dp)


def test_a_service_added_during_a_first_load_is_loaded_with_it() -> None:
    """A change made while a first load runs (``top_up``, before its last step): a new Service
    is loaded as one more chunk, reachable in the last step with the others."""

    def add(dp: Dataplane) -> None:
        dp.inputs.set_service(svc(20))
        dp.inputs.set_slice(eps(20, 3))

    dp, fake, top_up = _top_up_load(add)
    assert dp.sync(top_up).full
    assert len(fake.loads) == 5  # 3 chunks, the added Service, then every other element
    assert {key[0] for ld in fake.loads[3].loads for key, _ in ld.spreads} == {"10.96.0.21"}
    service_ips = {el.key for ld in fake.loads[-1].loads if ld.set.name == "service-ips" for el in ld.elements}
    assert ("10.96.0.21", "tcp", "80") in service_ips
    assert not dp.sync_due
    _matches_full_compile(dp, fake)
    assert dp.sync().operations == 0  # nothing left to send


def test_a_change_to_a_service_already_loaded_waits_for_the_next_sync() -> None:
    """The load's steps only add elements: a Service an earlier step loaded stays as loaded,
    dirty, and the next (partial) sync sends its change."""

    def change(dp: Dataplane) -> None:
        dp.inputs.set_slice(eps(0, 2, gen=50))
        dp.inputs.delete_service("default/s1")

    dp, fake, top_up = _top_up_load(change)
    assert dp.sync(top_up).full
    assert len(fake.loads) == 4  # nothing new to load
    assert dp.sync_due and len(dp.inputs.dirty) == 2
    result = dp.sync()
    assert not result.full
    # s0 has 2 endpoints now: its NodePort's objects of 2 (a map, 2 chains, 4 rules: 7 operations),
    # 7 deletions (s1's and s0's old entries: 4 + 1 + 1 + 2 + 2 + 1 + 4) and 5 additions
    # (s0's dispatch entries, its 2-endpoint slots, its local endpoint's hairpin pair: 2 + 1 + 2 + 4 + 2)
    assert (result.operations, result.element_changes) == (7 + 7 + 5, 15 + 11)
    assert not dp.sync_due
    _matches_full_compile(dp, fake)


def test_a_service_added_during_a_first_load_that_takes_a_loaded_ones_frontend_waits() -> None:
    """A new Service named before a loaded one, with the same ClusterIP, takes its frontends
    (the first by name wins): not merged into the load (it would change what an earlier step
    loaded), the next (partial) sync moves the frontends."""

    def steal(dp: Dataplane) -> None:
        dp.inputs.set_service(replace(svc(5), name="a-first"))
        dp.inputs.set_slice(replace(eps(5, 2, gen=70), name="a-first-x", service_name="a-first"))

    dp, fake, top_up = _top_up_load(steal)
    assert dp.sync(top_up).full
    assert len(fake.loads) == 4  # nothing new to load
    assert dp.sync_due and dp.in_sync and len(dp.inputs.dirty) == 1
    assert not dp.sync().full
    assert not dp.sync_due
    _matches_full_compile(dp, fake)
    assert any("default/s5" in str(s) for a in dp.assemblies.values() for s in a.skipped())


def test_the_fakes_dump_is_one_sorted_line_per_object_whatever_the_order_of_changes() -> None:
    """FakeBackend.dump (knftables' Fake.Dump): one statement per object, rule and element."""
    s = Set("s", "typeof ip daddr")
    one, two = FakeBackend(), FakeBackend()
    for fake, order in ((one, ["10.0.0.2", "10.0.0.10", "10.0.0.1"]), (two, ["10.0.0.1", "10.0.0.9"])):
        create = Transaction(Family.IP, "t")
        create.add_table("c")
        create.add_chain(Chain("z"))
        create.add_set(s)
        create.add_chain(Chain("a"))
        create.add_rule("a", "ip daddr @s accept")
        create.add_rule("a", "counter")
        fake.apply(create, _tx(*order))
    two.apply(_tx("10.0.0.10", "10.0.0.2"))
    gone = Transaction(Family.IP, "t")
    gone.delete_elements("s", [("10.0.0.9",)])
    two.apply(gone)
    assert (
        one.dump()
        == two.dump()
        == (
            'add table ip t { comment "c"; }\n'
            "add chain ip t a\n"
            "add chain ip t z\n"
            "add set ip t s { typeof ip daddr; }\n"
            "add rule ip t a ip daddr @s accept\n"
            "add rule ip t a counter\n"
            "add element ip t s { 10.0.0.1 }\n"
            "add element ip t s { 10.0.0.10 }\n"
            "add element ip t s { 10.0.0.2 }\n"
        )
    )
