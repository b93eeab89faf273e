"""A family's table as nft objects: the fixed skeleton (skeleton.py, per config) plus what an
ElementStore holds, rendered whole (``table``) or as the change a ChangeLog recorded (``delta``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from ipaddress import collapse_addresses

from nftproxy.compiler import counters, names, skeleton
from nftproxy.compiler.changelog import ChangeLog, Obj
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import spread_elements
from nftproxy.compiler.store import ElementStore
from nftproxy.nft.objects import Chain, Element, Family, Key, Set, Table, prefix
from nftproxy.nft.transaction import Transaction


class Renderer:
    """The skeleton of one family's table under one config: base sets and chains, the rules each
    per-count object gets, and the config's own elements (pod CIDRs, NodePort addresses)."""

    def __init__(self, family: Family, config: ProxyConfig) -> None:
        self.family = f = family
        self.name = config.table
        # the local-traffic detector (--detect-local-mode): None where kube-proxy's is a no-op
        detector = config.local_detector(f.version)
        if config.masquerade_all:
            self.masquerade: str | None = "jump mark-for-masquerade"
        elif detector is not None:
            self.masquerade = f"{detector.not_local} jump mark-for-masquerade"
        else:
            self.masquerade = None
        self.local = None if detector is None else detector.local  # pods skip Local policies
        self.pod_set = config.pod_source_set()  # declared: the mode's set of pod source CIDRs
        self.rejected = config.localhost_rejected(f.version)  # the loopback NodePort checks
        nodeport_ips = config.nodeport_ip_elements(f.version)
        self.nodeport_hosts = all("/" not in t and "-" not in t for t in nodeport_ips)  # skeleton.base_sets
        self.base_sets = {s.name: s for s in skeleton.base_sets(f, self.rejected, self.nodeport_hosts, self.pod_set)}
        self.mark = skeleton.masquerade_mark(config.masquerade_bit)
        self.base_chains = {c.name: c for c in skeleton.base_chains(f, self.rejected, self.mark)}
        self.counters = {c.name: c for c in skeleton.base_counters(self.rejected)}
        self.service_counters = config.service_counters  # counters.py: its sets and chains
        if self.service_counters:
            self.base_sets = {n: counters.counted(s) for n, s in self.base_sets.items()}
            self.base_sets.update((s.name, s) for s in counters.sets(f))
            self.base_chains.update((c.name, c) for c in counters.chains(f))
        self._parts: dict[Obj, tuple[list[Set], list[Chain]]] = {}
        self._set_owner: dict[str, Obj] = {}  # map name -> the object declaring it (memo)
        self.static: dict[str, dict[Key, Element]] = {n: {} for n in names.CONFIG_SETS if n in self.base_sets}
        if self.pod_set is not None:
            for net in collapse_addresses(config.pod_sources(f.version)):  # type: ignore[type-var]
                self.static[self.pod_set][(prefix(net),)] = Element((prefix(net),))
        for text in nodeport_ips:
            self.static[names.NODEPORT_IPS][(text,)] = Element((text,))
        for net in collapse_addresses([n for n in config.service_cidrs if n.version == f.version]):  # type: ignore[type-var]
            self.static[names.SERVICE_CIDRS][(prefix(net),)] = Element((prefix(net),))

    def object_parts(self, obj: Obj) -> tuple[list[Set], list[Chain]]:
        """Memoized: with round-robin Services (objects of their own, balancing.py) there are
        thousands of objects, and a bulk load asks for each map's declaration."""
        parts = self._parts.get(obj)
        if parts is None:
            if len(self._parts) > 50_000:  # bound the memo (objects come and go with Services)
                self._parts.clear()
                self._set_owner.clear()
            kind, n = obj
            parts = self._parts[obj] = skeleton.count_objects(self.family, kind, n, self.masquerade, self.local)
            for st in parts[0]:
                self._set_owner[st.name] = obj
        return parts

    def comment(self) -> str:
        extra = counters.digest_part(self.family) if self.service_counters else None
        return skeleton.layout_comment(
            self.family, self.masquerade, self.local, self.rejected, self.nodeport_hosts, self.pod_set, self.mark, extra
        )

    def chain_names(self, store: ElementStore) -> set[str]:
        """The chains of the table (base and per-count), without building the whole table."""
        names = set(self.base_chains)
        for obj in store.objects:
            names.update(c.name for c in self.object_parts(obj)[1])
        return names

    def set_named(self, store: ElementStore, name: str) -> Set:
        if name in self.base_sets:
            return self.base_sets[name]
        owner = self._set_owner.get(name)
        if owner is not None and owner in store.objects:
            for s in self.object_parts(owner)[0]:
                if s.name == name:
                    return s
        for obj in store.objects:
            for s in self.object_parts(obj)[0]:
                if s.name == name:
                    return s
        raise KeyError(name)

    def declare(self, tx: Transaction, objs: list[Obj]) -> None:
        """Declare these per-count objects: their maps, their chains, then the chains' rules
        (with nft 1.0.6 a rule binding a `typeof … th dport` map must come with its map)."""
        for obj in objs:
            sets, chains = self.object_parts(obj)
            for st in sets:
                tx.add_set(st)
            for c in chains:
                tx.add_chain(c)
            for c in chains:
                for rule in c.rules:
                    tx.add_rule(c.name, rule)

    def content_lines(self, store: ElementStore) -> Iterator[str]:
        """The table's contents as lines in a canonical order (for a checksum), endpoint maps
        unexpanded. One line at a time, in the order of the keys: rendering every line and sorting
        the lines (as before) held ~30k strings at once at 10k Services, every sync_period."""
        yield f"table {self.family.value} {self.name} {self.comment()}\n"
        yield from sorted(f"chain {name}\n" for name in self.chain_names(store))
        yield from sorted(f"counter {name}\n" for name in self.counters)
        for name in sorted(self.static):
            els = self.static[name]
            for key in sorted(els):
                yield f"{name} {els[key].render()}\n"
        values = store.values
        for k in sorted(values):
            yield f"{k[0]} {values[k].render()}\n"
        spreads = store.spreads
        for k in sorted(spreads):
            yield f"{k[0]} {' . '.join(k[1])} : {spreads[k]}\n"

    def table(self, store: ElementStore, expand: bool = True) -> Table:
        """The whole desired table (``expand=False``: without the endpoint maps' elements, which
        ``store.spreads`` holds; a bulk load packs them from there)."""
        sets = dict(self.base_sets)
        chains = dict(self.base_chains)
        for obj in sorted(store.objects):
            ss, cs = self.object_parts(obj)
            sets.update((s.name, s) for s in ss)
            chains.update((c.name, c) for c in cs)
        elements: dict[str, dict[Key, Element]] = {name: {} for name in sets}
        for name, els in self.static.items():
            elements[name].update(els)
        for (set_name, key), el in store.values.items():
            elements[set_name][key] = el
        if expand:
            for (map_name, key), values in store.spreads.items():
                target = elements[map_name]
                for el in spread_elements(key, values):
                    target[el.key] = el
        return Table(self.family, self.name, self.comment(), chains, sets, elements, counters=dict(self.counters))

    def delta(self, store: ElementStore, log: ChangeLog) -> Transaction:
        """Everything ``log`` recorded, as one transaction that touches only those elements and
        the per-count objects that appear or disappear, in an order the kernel accepts: new
        objects, element deletions, element additions, then the objects no longer used."""
        tx = Transaction(self.family, self.name)
        created = [o for o, existed in log.objects.items() if not existed and o in store.objects]
        removed = [o for o, existed in log.objects.items() if existed and o not in store.objects]
        dropped_sets = {s.name for o in removed for s in self.object_parts(o)[0]}
        self.declare(tx, sorted(created))
        deletes: dict[str, list[Key]] = {}
        adds: dict[str, list[Element]] = {}
        for (set_name, key), before in log.elements.items():
            now = store.values.get((set_name, key))
            if now == before:
                continue
            if before is not None and set_name not in dropped_sets:
                deletes.setdefault(set_name, []).append(key)
            if now is not None:
                adds.setdefault(set_name, []).append(now)
        for (map_name, key), before_values in log.spreads.items():
            now_values = store.spreads.get((map_name, key))
            if now_values == before_values:
                continue
            old_els = set(spread_elements(key, before_values or ()))
            new_els = list(spread_elements(key, now_values or ()))
            if map_name not in dropped_sets:
                keep = set(new_els)
                gone = sorted(e.key for e in old_els if e not in keep)
                if gone:
                    deletes.setdefault(map_name, []).extend(gone)
            new = [e for e in new_els if e not in old_els]
            if new:
                adds.setdefault(map_name, []).extend(new)
        for set_name in (*deletes, *adds):  # first: the elements are checked against them
            with contextlib.suppress(KeyError):
                tx.sets[set_name] = self.set_named(store, set_name)
        for set_name, keys in deletes.items():
            tx.delete_elements(set_name, keys)
        for set_name, els in adds.items():
            tx.add_elements(set_name, els)
        for obj in sorted(removed):
            ss, cs = self.object_parts(obj)
            for c in cs:
                tx.flush_chain(c.name)
            for s in ss:
                tx.delete_set(s.name, s.is_map)
            for c in cs:
                tx.delete_chain(c.name)
        return tx
