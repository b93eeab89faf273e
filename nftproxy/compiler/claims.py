"""Who owns each frontend (Service IP . proto . port, proto . NodePort): the first Service by
name, in whatever order they arrive. A Service wanting a frontend an earlier-named one holds is
left out whole, with a reason, and retried whenever a Service goes away or is left out."""

from __future__ import annotations

from dataclasses import dataclass

from nftproxy.compiler.fragment import Fragment
from nftproxy.model.types import Skipped
from nftproxy.nft.objects import Key


@dataclass(frozen=True)
class Conflict:
    fragment: Fragment
    skipped: Skipped


class Claims:
    def __init__(self, programmed: dict[str, Fragment]) -> None:
        self.owners: dict[Key, str] = {}
        self.conflicts: dict[str, Conflict] = {}  # Service key -> its fragment, left out
        # Service key -> its fragment, holding its claims: the ElementStore's, read here only (the
        # caller adds and removes what take/release decide; one table fewer of 10^4 entries).
        self.programmed = programmed

    def take(self, frag: Fragment) -> list[Fragment] | None:
        """Claim every frontend of ``frag``, or none. The first Service by name wins, whatever
        the order they arrive in (as a full compile decides): ``frag`` loses to an owner named
        before it (None: recorded as a conflict), and takes frontends from owners named after it;
        those owners' fragments are returned, moved to the conflicts (the caller unprograms them)."""
        owners, key = self.owners, frag.key
        if not any(owners.get(c, key) != key for c in frag.claims):  # the common case: all free
            for claim in frag.claims:
                owners[claim] = key
            return []
        held = {c: owners[c] for c in frag.claims if owners.get(c, key) != key}
        earlier = sorted((o, c) for c, o in held.items() if o < frag.key)
        if earlier:
            self._conflict(frag, *earlier[0])
            return None
        evicted = []
        for owner, claim in sorted({o: c for c, o in held.items()}.items()):
            loser = self.programmed[owner]
            self.release(loser)
            self._conflict(loser, frag.key, claim)
            evicted.append(loser)
        for claim in frag.claims:
            self.owners[claim] = frag.key
        return evicted

    def _conflict(self, frag: Fragment, owner: str, claim: Key) -> None:
        ns, _, name = frag.key.partition("/")
        reason = f"{' . '.join(claim)} is already used by Service {owner}"
        self.conflicts[frag.key] = Conflict(frag, Skipped("Service", ns, name, reason))

    def release(self, frag: Fragment) -> None:
        for claim in frag.claims:
            if self.owners.get(claim) == frag.key:
                del self.owners[claim]

    def drop(self, key: str) -> None:
        self.conflicts.pop(key, None)

    def waiting(self) -> list[Fragment]:
        """The left-out fragments, in name order, removed from the list (to be tried again)."""
        out = [self.conflicts.pop(k).fragment for k in sorted(self.conflicts)]
        return out

    def skipped(self) -> list[Skipped]:
        return [c.skipped for _, c in sorted(self.conflicts.items())]
