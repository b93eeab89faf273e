"""The fake backend is atomic like the kernel, and the first bulk load runs on it too (in
chunks, the dispatch maps last; rolled back when a later step fails)."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import pytest

from nftproxy.compiler import compile_tables
from nftproxy.dataplane import Dataplane
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import NftError
from nftproxy.nft.objects import Element, Family, Set, Table
from nftproxy.nft.transaction import Transaction
from tests.unit.test_incremental import CFG, eps, svc


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


def _elements(t: Table) -> dict[str, dict[tuple[str, ...], Element]]:
    return {name: dict(els) for name, els in t.elements.items() if els}


def _loaded(n: int) -> tuple[Dataplane, FakeBackend]:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.bulk_elements, dp.stream_services, dp.stream_chunks = 1, 1, 3
    for i in range(n):
        dp.set_service(svc(i, node_port=i % 2 == 0))
        dp.set_slice(eps(i, 1 + i % 4))
    return dp, fake


def test_first_bulk_load_in_chunks_equals_the_full_compile() -> None:
    dp, fake = _loaded(12)
    result = dp.sync()
    assert result.full and dp.batched > 0
    want = compile_tables(dp.services.values(), dp.slices.values(), CFG)
    for t in want.tables:
        got = fake.read(t.family, "nftproxy")
        assert got is not None
        assert _elements(got) == _elements(t)
        assert set(got.chains) == set(t.chains)
    assert len(fake.loads) == 4  # 3 chunks, then every other element
    dispatch = {"service-ips", "service-nodeports", "no-endpoint-services", "no-endpoint-nodeports"}
    for step in fake.loads[:-1]:  # until the last step, no Service is reachable
        assert not {ld.set.name for ld in step.loads} & dispatch
        assert not any(op.name in dispatch for tx in step.txs for op in tx.ops if op.what == "elements")
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
        dp.set_service(svc(i))
        dp.set_slice(eps(i, 2))
    with pytest.raises(NftError, match="rolled back: no nftproxy table, as before"):
        dp.sync()
    assert fake.tables == {}  # the declarations of the first two steps are gone again
    fake.n = -1
    assert dp.sync().full
    assert fake.read(Family.IP, "nftproxy") is not None
