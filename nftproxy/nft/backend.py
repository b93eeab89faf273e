"""What the dataplane needs of nftables: the Backend protocol (the kernel's, KernelBackend, or its
stand-in, FakeBackend) and its one error, NftError, which carries an errno (as knftables'
IsNotFound / IsAlreadyExists read its errors)."""

from __future__ import annotations

import errno as errnos
from collections.abc import Iterable
from typing import Protocol

from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.listing import CountedElement
from nftproxy.nft.objects import DynamicElement, Family, Set, Table
from nftproxy.nft.transaction import Transaction


class NftError(Exception):
    """nftables (the kernel, or nft's parser) refused a transaction; nothing of it was applied.

    ``errno`` says why, as the kernel or nft named it (ENOENT: a table, chain, set or element that
    does not exist; EEXIST: one that exists with other data; EBUSY: still referenced; ...), and
    EINVAL when nft names none (its parser or its evaluation refused the statement). The message
    is nft's, with the refused statement: users read it."""

    def __init__(self, message: str, errno: int = errnos.EINVAL) -> None:
        super().__init__(message)
        self.errno = errno


class PartialLoadError(NftError):
    """A load in several kernel transactions failed half-way and its first steps stayed."""


def is_not_found(e: BaseException) -> bool:
    """Was ``e`` an nftables error about something that does not exist (ENOENT)?"""
    return isinstance(e, NftError) and e.errno == errnos.ENOENT


def is_exists(e: BaseException) -> bool:
    """Was ``e`` an nftables error about something that exists already (EEXIST)?"""
    return isinstance(e, NftError) and e.errno == errnos.EEXIST


def invalid(txs: Iterable[Transaction]) -> NftError | None:
    """The error of the first transaction an invalid operation was appended to (its first error
    sticks, as knftables'): a backend raises it and sends nothing."""
    for tx in txs:
        if tx.error is not None:
            return NftError(tx.error, errnos.EINVAL)
    return None


class Backend(Protocol):
    """What the syncer needs of the kernel (KernelBackend) or of its stand-in (FakeBackend)."""

    def apply(self, *txs: Transaction) -> None:
        """Commit all of ``txs`` as ONE kernel transaction, or raise NftError and change nothing."""

    def load(self, steps: Iterable[LoadStep]) -> int:
        """Commit each step (one kernel transaction each, in order); return the elements sent.
        Steps are pulled one at a time, so the caller may compute the next one meanwhile. On a
        failure, raise NftError once the steps already queued are done (earlier ones stay)."""

    def read(self, family: Family, table: str) -> Table | None: ...

    def delete(self, family: Family, table: str) -> bool: ...

    def check(self, *txs: Transaction) -> None:
        """Would the kernel take ``txs`` as one transaction? Raise NftError (with the refused
        statement) if not. A dry run: nothing changes in the kernel."""

    def chain_names(self, family: Family, table: str) -> set[str] | None:
        """The table's chain names (cheap: no set elements are fetched); None if it is absent."""

    def read_dynamic(self, family: Family, table: str, set_name: str) -> list[DynamicElement]:
        """The elements the packet path wrote into a dynamic map, with their timeouts."""

    def counter_packets(self, family: Family, table: str) -> dict[str, int]:
        """The packets each named counter of the table counted ({} without the table)."""

    def counted_elements(self, family: Family, table: str, sets: Iterable[Set]) -> dict[str, list[CountedElement]]:
        """The elements of these sets with their counters, in one listing ({} without the table)."""

    def chain_rules(self, family: Family, table: str) -> dict[str, tuple[str, ...]] | None:
        """Each chain's rules, as nft lists them (in order); None if the table is absent."""
