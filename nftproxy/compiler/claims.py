"""Who owns each frontend (Service IP . proto . port, proto . NodePort): the first Service by
name. A Service wanting a frontend another one holds is left out whole, with a reason, and
retried whenever a Service goes away."""

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
    def __init__(self) -> None:
        self.owners: dict[Key, str] = {}
        self.conflicts: dict[str, Conflict] = {}  # Service key -> its fragment, left out

    def take(self, frag: Fragment) -> bool:
        """Claim every frontend of ``frag``, or none (then it is recorded as a conflict)."""
        for claim in frag.claims:
            owner = self.owners.get(claim)
            if owner is not None and owner != frag.key:
                ns, _, name = frag.key.partition("/")
                reason = f"{' . '.join(claim)} is already used by Service {owner}"
                self.conflicts[frag.key] = Conflict(frag, Skipped("Service", ns, name, reason))
                return False
        for claim in frag.claims:
            self.owners[claim] = frag.key
        return True

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
