"""What changed in a family's table since the kernel last took it: the state each changed
element, endpoint-map entry and per-count object had at the last successful sync.

``delta`` turns it into the transaction to send; the syncer's cleanups ask it what went away
(UDP frontends whose serving endpoints changed, affinity frontends touched). ``clear`` after a
successful sync; ``enabled`` is off while the kernel's state is unknown (the next sync compares
whole tables, and recording what a bulk load touches, 10^5 entries, would only cost time).
"""

from __future__ import annotations

from nftproxy.nft.objects import Element, Key, Slot

Obj = tuple[str, int]  # (kind, N): kinds in skeleton.KINDS


class ChangeLog:
    def __init__(self) -> None:
        self.enabled = True
        self.elements: dict[tuple[str, Key], Element | None] = {}  # (set, key) -> value at last sync
        self.spreads: dict[tuple[str, Key], tuple[Slot, ...] | None] = {}  # (map, frontend) -> slots
        self.objects: dict[Obj, bool] = {}  # per-count object -> existed at last sync
        self.udp: dict[Key, frozenset[str] | None] = {}  # UDP frontend -> serving endpoint IPs

    def element(self, k: tuple[str, Key], before: Element | None) -> None:
        if self.enabled:
            self.elements.setdefault(k, before)

    def spread(self, k: tuple[str, Key], before: tuple[Slot, ...] | None) -> None:
        if self.enabled:
            self.spreads.setdefault(k, before)

    def object(self, obj: Obj, existed: bool) -> None:
        if self.enabled:
            self.objects.setdefault(obj, existed)

    def udp_frontend(self, key: Key, before: frozenset[str] | None) -> None:
        if self.enabled:
            self.udp.setdefault(key, before)

    def touched_sets(self) -> set[str]:
        """Names of the sets/maps with an element added, changed or removed."""
        return {name for name, _ in self.elements}

    def clear(self) -> None:
        self.elements.clear()
        self.spreads.clear()
        self.objects.clear()
        self.udp.clear()
