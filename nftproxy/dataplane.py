"""The syncer's core: diff desired tables against what is applied, commit ONE transaction.

What is applied is known in memory after each successful commit. It is unknown at start and
after any failure; then it is read back from the kernel (a failed transaction may still have
committed, as libnftables can report failure of a large commit that went through).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from nftproxy.nft.diff import plan
from nftproxy.nft.kernel import Backend
from nftproxy.nft.objects import Family, Table
from nftproxy.nft.transaction import Transaction


@dataclass(frozen=True)
class SyncResult:
    full: bool  # applied state was read back from the kernel (start, after a failure)
    operations: int  # nft commands sent
    element_changes: int  # elements added or deleted
    seconds: float  # plan + commit


class Dataplane:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.applied: dict[Family, Table] = {}

    def forget(self) -> None:
        """Distrust the in-memory state: the next sync reads the kernel (a full sync)."""
        self.applied.clear()

    def plan(self, desired: Iterable[Table]) -> tuple[list[Transaction], bool]:
        txs = []
        full = False
        for table in desired:
            applied = self.applied.get(table.family)
            if applied is None:
                full = True
                applied = self.backend.read(table.family, table.name)
            txs.append(plan(applied, table))
        return txs, full

    def sync(self, desired: Iterable[Table]) -> SyncResult:
        tables = list(desired)
        start = time.perf_counter()
        txs, full = self.plan(tables)
        try:
            self.backend.apply(*txs)
        except Exception:
            self.forget()
            raise
        for t in tables:
            self.applied[t.family] = t
        return SyncResult(
            full=full,
            operations=sum(len(tx) for tx in txs),
            element_changes=sum(tx.element_changes() for tx in txs),
            seconds=time.perf_counter() - start,
        )

    def cleanup(self, name: str) -> list[Family]:
        """Remove nftproxy's own tables (and nothing else)."""
        self.forget()
        return [f for f in Family if self.backend.delete(f, name)]
