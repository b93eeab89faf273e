"""A table replaced in one transaction goes through a handover table (names.HANDOVER_SUFFIX):
the new contents are committed first under ``nftproxy-handover``, then the table is replaced,
then the handover table is deleted. tests/netns/test_replacement_window.py shows why with real
packets; here the order, a refused replacement and a handover table a crash left."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.backend import NftError
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from nftproxy.nft.transaction import AddTable, DeleteTable, Transaction
from tests.support.builders import CFG, eps, svc

HANDOVER = "nftproxy-handover"


class Recording(FakeBackend):
    """The fake kernel, keeping each commit's (table, what it did to it) in order."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[list[tuple[str, str]]] = []

    def apply(self, *txs: Transaction) -> None:
        self.commits.append([(tx.table, _what(tx)) for tx in txs])
        super().apply(*txs)


def _what(tx: Transaction) -> str:
    kinds = {type(op) for op in tx.ops if isinstance(op, AddTable | DeleteTable)}
    if kinds == {AddTable, DeleteTable}:
        return "replace"
    return "add" if AddTable in kinds else "delete" if DeleteTable in kinds else "change"


def synced(fake: FakeBackend, masquerade_all: bool) -> Dataplane:
    dp = Dataplane(fake, replace(CFG, masquerade_all=masquerade_all))  # another layout per value
    for i in range(3):
        dp.inputs.set_service(svc(i, node_port=True))
        dp.inputs.set_slice(eps(i, 2))
    dp.sync()
    return dp


def test_a_replacement_loads_the_handover_table_first_and_deletes_it_after() -> None:
    fake = Recording()
    synced(fake, masquerade_all=False)
    assert fake.commits == [[("nftproxy", "add"), ("nftproxy", "add")]]  # a first load: no handover
    fake.commits.clear()
    synced(fake, masquerade_all=True)
    assert fake.commits == [
        [(HANDOVER, "add"), (HANDOVER, "add")],
        [("nftproxy", "replace"), ("nftproxy", "replace")],
        [(HANDOVER, "delete"), (HANDOVER, "delete")],
    ]
    assert set(fake.tables) == {(Family.IP, "nftproxy"), (Family.IP6, "nftproxy")}


def test_the_handover_table_holds_the_new_tables_contents() -> None:
    fake = Recording()
    synced(fake, masquerade_all=False)
    seen = {}
    real_apply = FakeBackend.apply

    def apply(self: Recording, *txs: Transaction) -> None:
        real_apply(self, *txs)
        if any(tx.table == HANDOVER for tx in txs) and (Family.IP, HANDOVER) in self.tables:
            seen["handover"] = self.tables[(Family.IP, HANDOVER)]

    fake.apply = apply.__get__(fake)  # type: ignore[method-assign]
    synced(fake, masquerade_all=True)
    new = fake.tables[(Family.IP, "nftproxy")]
    assert seen["handover"].elements == new.elements and set(seen["handover"].chains) == set(new.chains)


def test_a_refused_replacement_deletes_the_handover_table_and_keeps_the_old_table() -> None:
    fake = Recording()
    synced(fake, masquerade_all=False)
    before = {k: (dict(t.elements), t.comment) for k, t in fake.tables.items()}
    fake.commits.clear()
    dp = Dataplane(fake, replace(CFG, masquerade_all=True))
    dp.inputs.set_service(svc(0, node_port=True))
    dp.inputs.set_slice(eps(0, 2))

    calls = {"n": 0}
    real_apply = FakeBackend.apply

    def apply(self: Recording, *txs: Transaction) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the replacement itself
            raise NftError("Error: the kernel refused it")
        real_apply(self, *txs)

    fake.apply = apply.__get__(fake)  # type: ignore[method-assign]
    with pytest.raises(NftError):
        dp.sync()
    assert calls["n"] == 3  # handover, the refused replacement, the handover deleted
    assert {k: (dict(t.elements), t.comment) for k, t in fake.tables.items()} == before


def test_a_handover_table_left_by_a_crash_is_deleted_by_the_next_full_sync() -> None:
    fake = Recording()
    synced(fake, masquerade_all=False)
    for f in Family:  # a proxy killed between its handover and its replacement
        tx = Transaction(f, HANDOVER)
        tx.add_table("nftproxy handover")
        FakeBackend.apply(fake, tx)
    synced(fake, masquerade_all=False)  # a restart: same layout, adopted
    assert set(fake.tables) == {(Family.IP, "nftproxy"), (Family.IP6, "nftproxy")}
