"""A family's whole table, assembled from Service fragments, updatable one Service at a time.

The same code serves the pure full compile (``compile_tables``) and the syncer's incremental
path: ``put`` changes one Service, ``delta`` turns everything changed since the last ``commit``
into one Transaction that touches only those elements (and the per-count objects that appear or
disappear), in an order the kernel accepts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import collapse_addresses, ip_network

from nftproxy.compiler import skeleton
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import Fragment, Slot, spread_elements
from nftproxy.model.types import IPNetwork, Skipped
from nftproxy.nft.objects import Chain, Element, Family, Key, Set, Table
from nftproxy.nft.transaction import Transaction

Obj = tuple[str, int]  # (kind, N): kinds in skeleton.KINDS


@dataclass(frozen=True)
class Conflict:
    fragment: Fragment
    skipped: Skipped


def _addr_or_cidr(net: IPNetwork) -> str:
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


class Assembly:
    def __init__(self, family: Family, config: ProxyConfig) -> None:
        self.family = family
        self.config = config
        f = family
        mine = [n for n in config.cluster_cidrs if n.version == f.version]
        if config.masquerade_all:
            self.masquerade: str | None = "jump mark-for-masquerade"
        elif mine:
            self.masquerade = f"{f.value} saddr != @cluster-cidrs jump mark-for-masquerade"
        else:
            self.masquerade = None
        self.pods = bool(mine)  # pod sources are known: Local-policy short-circuits apply to them
        self.base_sets = {s.name: s for s in skeleton.base_sets(f)}
        self.base_chains = {c.name: c for c in skeleton.base_chains(f)}
        self.static: dict[str, dict[Key, Element]] = {"cluster-cidrs": {}, "nodeport-ips": {}}
        for net in collapse_addresses(mine):  # type: ignore[type-var]
            self.static["cluster-cidrs"][(_addr_or_cidr(net),)] = Element((_addr_or_cidr(net),))
        np_nets: list[IPNetwork] = [n for n in config.nodeport_addresses if n.version == f.version]
        if not config.nodeport_addresses:
            np_nets = [ip_network(ip) for ip in config.node_ips if ip.version == f.version]
        for net in collapse_addresses(np_nets):  # type: ignore[type-var]
            self.static["nodeport-ips"][(_addr_or_cidr(net),)] = Element((_addr_or_cidr(net),))

        self.fragments: dict[str, Fragment] = {}  # programmed
        self.conflicts: dict[str, Conflict] = {}  # left out: a frontend is another Service's
        self.owners: dict[Key, str] = {}
        self.values: dict[tuple[str, Key], Element] = {}  # (set, key) -> element
        self.counts: dict[tuple[str, Key], int] = {}  # (set, key) -> fragments holding it
        # Endpoint map entries: (map, frontend) -> slot values. Never shared: the frontend is a
        # claim, held by one fragment at most (no reference counts).
        self.spreads: dict[tuple[str, Key], tuple[Slot, ...]] = {}
        self.objects: Counter[Obj] = Counter()
        self.endpoints: Counter[tuple[str, int]] = Counter()  # endpoint -> fragments using it
        # Changes since the last commit: the value / existence each had when last committed.
        self.touched: dict[tuple[str, Key], Element | None] = {}
        self.touched_spreads: dict[tuple[str, Key], tuple[Slot, ...] | None] = {}
        self.touched_objects: dict[Obj, bool] = {}
        # False while the kernel's state is unknown (the next sync compares whole tables): then
        # recording what each change touched would only cost time (a bulk load touches 10^5).
        self.tracking = True
        self.lost: list[tuple[str, str, str, str, str]] = []  # set by delta(), see _lost_endpoints

    # -- updating ------------------------------------------------------------------------
    def put(self, key: str, fragment: Fragment | None) -> None:
        """Replace Service ``key``'s fragment (None: the Service is gone from this family)."""
        old = self.fragments.pop(key, None)
        self.conflicts.pop(key, None)
        if old is not None:
            self._remove(old)
        if fragment is not None:
            self._try_add(fragment)
        if old is not None and self.conflicts:
            for k in sorted(self.conflicts):  # a frontend may be free now
                c = self.conflicts.pop(k)
                self._try_add(c.fragment)

    def _try_add(self, frag: Fragment) -> None:
        for claim in frag.claims:
            owner = self.owners.get(claim)
            if owner is not None and owner != frag.key:
                ns, _, name = frag.key.partition("/")
                reason = f"{' . '.join(claim)} is already used by Service {owner}"
                self.conflicts[frag.key] = Conflict(frag, Skipped("Service", ns, name, reason))
                return
        self.fragments[frag.key] = frag
        for claim in frag.claims:
            self.owners[claim] = frag.key
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            n = self.counts.get(k, 0)
            if n == 0:
                if self.tracking:
                    self.touched.setdefault(k, None)
                self.values[k] = el
            self.counts[k] = n + 1
        tracking = self.tracking
        for map_name, key, values in frag.spreads:
            k = (map_name, key)
            if tracking:
                self.touched_spreads.setdefault(k, None)
            self.spreads[k] = values
        self.endpoints.update(frag.endpoints)
        for obj in self._objs(frag):
            if self.objects[obj] == 0 and self.tracking:
                self.touched_objects.setdefault(obj, False)
            self.objects[obj] += 1

    def _remove(self, frag: Fragment) -> None:
        for claim in frag.claims:
            if self.owners.get(claim) == frag.key:
                del self.owners[claim]
        for set_name, el in frag.elements:
            k = (set_name, el.key)
            n = self.counts[k] - 1
            if n == 0:
                old = self.values.pop(k)
                if self.tracking:
                    self.touched.setdefault(k, old)
                del self.counts[k]
            else:
                self.counts[k] = n
        for map_name, key, _ in frag.spreads:
            k = (map_name, key)
            old_values = self.spreads.pop(k)
            if self.tracking:
                self.touched_spreads.setdefault(k, old_values)
        self.endpoints.subtract(frag.endpoints)
        for ep in frag.endpoints:
            if self.endpoints[ep] <= 0:
                del self.endpoints[ep]
        for obj in self._objs(frag):
            self.objects[obj] -= 1
            if self.objects[obj] == 0:
                if self.tracking:
                    self.touched_objects.setdefault(obj, True)
                del self.objects[obj]

    @staticmethod
    def _objs(frag: Fragment) -> Iterator[Obj]:
        yield from frag.objects

    # -- reading -------------------------------------------------------------------------
    def skipped(self) -> list[Skipped]:
        return [c.skipped for _, c in sorted(self.conflicts.items())]

    def object_parts(self, obj: Obj) -> tuple[list[Set], list[Chain]]:
        kind, n = obj
        return skeleton.count_objects(self.family, kind, n, self.masquerade, self.pods)

    def chain_names(self) -> set[str]:
        """The chains of the table (base and per-count), without building the whole table."""
        names = set(self.base_chains)
        for obj in self.objects:
            names.update(c.name for c in self.object_parts(obj)[1])
        return names

    def comment(self) -> str:
        return skeleton.layout_comment(self.family, self.masquerade, self.pods)

    def element_count(self) -> int:
        return len(self.values) + sum(len(v) for v in self.spreads.values()) + sum(map(len, self.static.values()))

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

    def content_lines(self) -> list[str]:
        """The table's contents as sorted lines (for a checksum), endpoint maps unexpanded."""
        lines = [f"table {self.family.value} {self.config.table} {self.comment()}\n"]
        lines += sorted(f"chain {name}\n" for name in self.chain_names())
        els = [f"{name} {el.render()}\n" for name, els in self.static.items() for el in els.values()]
        els += [f"{name} {el.render()}\n" for (name, _), el in self.values.items()]
        els += [f"{name} {' . '.join(key)} : {values}\n" for (name, key), values in self.spreads.items()]
        return lines + sorted(els)

    def table(self, expand: bool = True) -> Table:
        """The whole desired table (``expand=False``: without the endpoint maps' elements, which
        ``spreads`` holds; a bulk load packs them from there)."""
        sets = dict(self.base_sets)
        chains = dict(self.base_chains)
        for obj in sorted(self.objects):
            ss, cs = self.object_parts(obj)
            sets.update((s.name, s) for s in ss)
            chains.update((c.name, c) for c in cs)
        elements: dict[str, dict[Key, Element]] = {name: {} for name in sets}
        for name, els in self.static.items():
            elements[name].update(els)
        for (set_name, key), el in self.values.items():
            elements[set_name][key] = el
        if expand:
            for (map_name, key), values in self.spreads.items():
                target = elements[map_name]
                for el in spread_elements(key, values):
                    target[el.key] = el
        return Table(self.family, self.config.table, self.comment(), chains, sets, elements)

    def delta(self) -> Transaction:
        """Everything changed since the last commit, as one transaction (see module doc)."""
        tx = Transaction(self.family, self.config.table)
        created = [o for o, existed in self.touched_objects.items() if not existed and o in self.objects]
        removed = [o for o, existed in self.touched_objects.items() if existed and o not in self.objects]
        dropped_sets = {s.name for o in removed for s in self.object_parts(o)[0]}
        self.declare(tx, sorted(created))
        deletes: dict[str, list[Key]] = {}
        adds: dict[str, list[Element]] = {}
        for (set_name, key), before in self.touched.items():
            now = self.values.get((set_name, key))
            if now == before:
                continue
            if before is not None and set_name not in dropped_sets:
                deletes.setdefault(set_name, []).append(key)
            if now is not None:
                adds.setdefault(set_name, []).append(now)
        for (map_name, key), before_values in self.touched_spreads.items():
            now_values = self.spreads.get((map_name, key))
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
        self.lost = self._lost_endpoints()
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

    def _lost_endpoints(self) -> list[tuple[str, str, str, str, str]]:
        """Endpoints a frontend stops using in this delta: (frontend IP or "" for a NodePort, proto,
        port, endpoint IP, endpoint port): every endpoint map entry it had at the last commit,
        minus those it has now."""
        old: dict[tuple[str, str, str], set[Slot]] = {}
        new: dict[tuple[str, str, str], set[Slot]] = {}
        for (map_name, key), before in self.touched_spreads.items():
            frontend = ("", key[0], key[1]) if map_name.startswith("nodeport-") else (key[0], key[1], key[2])
            now = self.spreads.get((map_name, key))
            if before:
                old.setdefault(frontend, set()).update(before)
            if now:
                new.setdefault(frontend, set()).update(now)
        return sorted((*f, *ep) for f, eps in old.items() for ep in eps - new.get(f, set()))

    @property
    def stale_udp(self) -> list[tuple[str, str, str]]:
        """UDP "connections" are conntrack entries that keep their DNAT: unless deleted, a client
        sending from the same port keeps talking to a removed endpoint (kube-proxy clears them)."""
        return [(ip, port, ep) for ip, proto, port, ep, _ in self.lost if proto == "udp"]

    def affinity_frontend(self, ip: str, proto: str, port: str) -> bool:
        """Does (or did, before this delta) this frontend have sessionAffinity ClientIP?"""
        key = ("affinity-nodeports", (proto, port)) if not ip else ("affinity-services", (ip, proto, port))
        return key in self.values or self.touched.get(key) is not None

    def commit(self) -> None:
        """The kernel now holds this state (after a successful delta or full sync)."""
        self.touched.clear()
        self.touched_spreads.clear()
        self.touched_objects.clear()
