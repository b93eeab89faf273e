"""The elements of a family's table, held by the fragments that put them there.

Plain set/map elements are reference-counted (two Services may need the same hairpin or
ClusterIP entry); endpoint-map entries ("spreads") and UDP serving sets are keyed by a frontend
one Service claims, so they need no counts. Every change is told to the ChangeLog with the value
it replaces.
"""

from __future__ import annotations

from collections import Counter

from nftproxy.compiler.changelog import ChangeLog, Obj
from nftproxy.compiler.fragment import Fragment
from nftproxy.nft.objects import Element, Key, Slot


class ElementStore:
    def __init__(self, log: ChangeLog) -> None:
        self.log = log
        self.fragments: dict[str, Fragment] = {}  # programmed, by Service key
        self.health: dict[str, Fragment] = {}  # the fragments with a healthCheckNodePort
        self.warned: dict[str, Fragment] = {}  # the fragments with warnings (reported as skips)
        self.localhost: dict[str, Fragment] = {}  # the fragments with localhost NodePorts
        self.localhost_generation = 0  # bumped whenever one of those comes or goes
        self.values: dict[tuple[str, Key], Element] = {}  # (set, key) -> element
        # (set, key) -> fragments holding it, only where two or more do: nearly every element has
        # one holder, and a second table as big as ``values`` doubled too under churn.
        self.counts: dict[tuple[str, Key], int] = {}
        self.spreads: dict[tuple[str, Key], tuple[Slot, ...]] = {}  # (map, frontend) -> slot values
        self.objects: Counter[Obj] = Counter()  # per-count objects -> fragments needing them
        self.endpoints: Counter[Slot] = Counter()  # endpoint (address, port) -> fragments using it
        self.udp_serving: dict[Key, frozenset[str]] = {}  # UDP frontend -> serving endpoints (IP, IP|port)

    def add(self, frag: Fragment) -> None:
        log = self.log
        tracking = log.enabled  # off during a full compile: 10^5 calls saved
        self.fragments[frag.key] = frag
        if frag.health_check_port:
            self.health[frag.key] = frag
        if frag.warnings:
            self.warned[frag.key] = frag
        if frag.localhost:
            self.localhost[frag.key] = frag
            self.localhost_generation += 1
        values, counts = self.values, self.counts
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            if k in values:
                counts[k] = counts.get(k, 1) + 1
            else:
                if tracking:
                    log.element(k, None)
                values[k] = el
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
        if self.localhost.pop(key, None) is not None:
            self.localhost_generation += 1
        log = self.log
        counts = self.counts
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            n = counts.get(k, 1) - 1
            if n == 0:
                log.element(k, self.values.pop(k))
            elif n == 1:
                del counts[k]
            else:
                counts[k] = n
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
