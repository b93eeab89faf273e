"""The elements of a family's table, held by the fragments that put them there.

Plain set/map elements are reference-counted (two Services may need the same hairpin or
ClusterIP entry); endpoint-map entries ("spreads") and UDP serving sets are keyed by a frontend
one Service claims, so they need no counts. Every change is told to the ChangeLog with the value
it replaces.
"""

from __future__ import annotations

from collections import Counter

from nftproxy.compiler.changelog import ChangeLog, Obj, Slot
from nftproxy.compiler.fragment import Fragment
from nftproxy.nft.objects import Element, Key


class ElementStore:
    def __init__(self, log: ChangeLog, holders: Counter[str] | None = None) -> None:
        self.log = log
        self.fragments: dict[str, Fragment] = {}  # programmed, by Service key
        # Service key -> stores (families) holding it: shared by a dataplane's families, so the
        # number of Services programmed is len(holders), not a walk of every fragment.
        self.holders: Counter[str] = Counter() if holders is None else holders
        self.health: dict[str, Fragment] = {}  # the fragments with a healthCheckNodePort
        self.warned: dict[str, Fragment] = {}  # the fragments with warnings (reported as skips)
        self.values: dict[tuple[str, Key], Element] = {}  # (set, key) -> element
        self.counts: dict[tuple[str, Key], int] = {}  # (set, key) -> fragments holding it
        self.spreads: dict[tuple[str, Key], tuple[Slot, ...]] = {}  # (map, frontend) -> slot values
        self.objects: Counter[Obj] = Counter()  # per-count objects -> fragments needing them
        self.endpoints: Counter[tuple[str, int]] = Counter()  # endpoint -> fragments using it
        self.udp_serving: dict[Key, frozenset[str]] = {}  # UDP frontend -> serving endpoint IPs

    def add(self, frag: Fragment) -> None:
        log = self.log
        tracking = log.enabled  # off during a full compile: 10^5 calls saved
        self.fragments[frag.key] = frag
        self.holders[frag.key] += 1
        if frag.health_check_port:
            self.health[frag.key] = frag
        if frag.warnings:
            self.warned[frag.key] = frag
        values, counts = self.values, self.counts
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            n = counts.get(k, 0)
            if n == 0:
                if tracking:
                    log.element(k, None)
                values[k] = el
            counts[k] = n + 1
        spreads = self.spreads
        for map_name, key, slot_values in frag.spreads:
            k = (map_name, key)
            if tracking:
                log.spread(k, None)
            spreads[k] = slot_values
        for key, ips in frag.udp_serving:
            log.udp_frontend(key, None)
            self.udp_serving[key] = ips
        self.endpoints.update(frag.endpoints)
        objects = self.objects
        for obj in frag.objects:
            if objects[obj] == 0:
                log.object(obj, False)
            objects[obj] += 1

    def remove(self, key: str) -> Fragment | None:
        frag = self.fragments.pop(key, None)
        if frag is None:
            return None
        self.health.pop(key, None)
        self.warned.pop(key, None)
        self.holders[key] -= 1
        if self.holders[key] <= 0:
            del self.holders[key]
        log = self.log
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            n = self.counts[k] - 1
            if n == 0:
                log.element(k, self.values.pop(k))
                del self.counts[k]
            else:
                self.counts[k] = n
        for map_name, fkey, _ in frag.spreads:
            k = (map_name, fkey)
            log.spread(k, self.spreads.pop(k))
        for fkey, _ in frag.udp_serving:
            log.udp_frontend(fkey, self.udp_serving.pop(fkey))
        self.endpoints.subtract(frag.endpoints)
        for ep in frag.endpoints:
            if self.endpoints[ep] <= 0:
                del self.endpoints[ep]
        for obj in frag.objects:
            self.objects[obj] -= 1
            if self.objects[obj] == 0:
                log.object(obj, True)
                del self.objects[obj]
        return frag

    def element_count(self) -> int:
        return len(self.values) + sum(len(v) for v in self.spreads.values())
