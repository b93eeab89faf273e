"""A sync the kernel refused: which Services make it fail (dry runs of their fragments,
``backend.check``: no kernel state changes), to leave them out. One bad object (or a compiler bug
that only one Service's shape meets) would otherwise stop every other Service's changes on the
node, retried for ever."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from nftproxy.compiler.assembly import Assembly
from nftproxy.compiler.config import ProxyConfig
from nftproxy.model.types import Skipped
from nftproxy.nft.backend import Backend, NftError
from nftproxy.nft.diff import create
from nftproxy.nft.objects import Family
from nftproxy.nft.transaction import Transaction

log = logging.getLogger("nftproxy.dataplane")

REFUSED = "the kernel refused its"  # a Skipped reason's start: "… IPv4 rules: Error: … [statement]"
CHECK_TABLE = "nftproxy-check"  # the name dry runs use (never created: see _Checker)

Refused = dict[tuple[Family, str], str]  # (family, Service) -> the kernel's error


def find_refused(
    error: NftError, backend: Backend, assemblies: Iterable[Assembly], config: ProxyConfig, suspects: set[str]
) -> Refused:
    """The Services whose elements the kernel refuses alone, per family, found by dry runs of the
    compiled ``assemblies`` (``suspects`` first: those compiled since the last commit, as after a
    partial sync of one change). Empty: no Service alone is to blame (the skeleton, the kernel's
    state, or two Services together)."""
    log.info("sync refused: %s; checking which Services the kernel refuses", error)
    found: Refused = {}
    for a in assemblies:
        check = _Checker(backend, a, config)
        if check(()) is not None:
            log.error("the kernel refuses the %s table without any Service: %s", a.family.value, check.error)
            return {}
        keys = sorted(a.fragments)
        first = sorted(suspects & a.fragments.keys())
        guilty: list[tuple[str, str]] = []
        if first and len(first) < len(keys) and check(first) is not None:
            guilty = check.bisect(first)
            if guilty and check([k for k in keys if k not in dict(guilty)]) is not None:
                guilty = []  # more of them among the others: look at all
        if not guilty:
            guilty = check.bisect(keys, ways=8)
        for key, why in guilty:
            found[(a.family, key)] = why
    for (family, key), why in found.items():
        log.error(
            "Service %s left out of the %s table: the kernel refuses its elements: %s "
            "(tried again when its objects change, or at the next full sync)",
            key, family.value, why,
        )  # fmt: skip
    return found


def refused_skips(refused: Refused) -> list[Skipped]:
    """The refused Services as skipped objects, with the kernel's error (ProxyStatus, Events)."""
    out = []
    for (family, key), why in sorted(refused.items()):
        ns, _, name = key.partition("/")
        out.append(Skipped("Service", ns, name, f"{REFUSED} IPv{family.version} rules: {why}", "RefusedByKernel"))
    return out


class _Checker:
    """Dry runs of one family's table with some of its Services only (a table of another name,
    built from the fragments already compiled): does the kernel take these Services' elements?"""

    def __init__(self, backend: Backend, a: Assembly, config: ProxyConfig) -> None:
        self.backend = backend
        self.assembly = a
        self.table = config.table
        self.config = replace(config, table=CHECK_TABLE)
        self.error = ""

    def __call__(self, keys: Iterable[str]) -> str | None:
        """None if the kernel takes the table with these Services, else its error."""
        trial = Assembly(self.assembly.family, self.config)
        frags = self.assembly.fragments
        for key in keys:
            trial.put(key, frags[key])
        tx = Transaction(trial.family, CHECK_TABLE)
        create(tx, trial.table())
        try:
            self.backend.check(tx)
        except NftError as e:  # the statement as it would read in our own table
            self.error = str(e).replace(f" {CHECK_TABLE} ", f" {self.table} ")
            return self.error
        return None

    def bisect(self, keys: list[str], ways: int = 2) -> list[tuple[str, str]]:
        """The Services among ``keys`` that the kernel refuses alone, with its errors: ``keys``
        are checked in ``ways`` parts, and only a failing part is split again (in halves).

        A dry run costs nft's parse of every element in it (~0.6 s for the 25k elements of
        1,000 Services x 10 on a busy 2-core machine, tests/netns/test_refused_service.py): with
        8 parts first, one bad Service costs ~1.3x the table's elements in dry runs, not the
        ~2.3x of halving from the top."""
        if len(keys) <= 1:
            why = self(keys) if keys else None
            return [(keys[0], why)] if why is not None else []
        size = -(-len(keys) // ways)
        out = []
        for part in (keys[i : i + size] for i in range(0, len(keys), size)):
            if len(part) == 1 or self(part) is not None:
                out += self.bisect(part)
        return out
