"""A family's whole table, assembled from Service fragments, updatable one Service at a time.

The pieces, each with one job: ``Claims`` (which Service owns each frontend), ``ElementStore``
(the elements the programmed fragments hold), ``ChangeLog`` (what changed since the last
successful sync) and ``Renderer`` (the skeleton, and nft objects out of the store). The same code
serves the pure full compile (``compile_tables``) and the syncer's incremental path: ``put``
changes one Service, ``delta`` turns the change log into one Transaction, ``commit`` says the
kernel took it.
"""

from __future__ import annotations

from collections.abc import Iterator

from nftproxy.compiler import balancing, names
from nftproxy.compiler.changelog import ChangeLog, Obj
from nftproxy.compiler.claims import Claims
from nftproxy.compiler.config import ProxyConfig
from nftproxy.compiler.fragment import Fragment
from nftproxy.compiler.render import Renderer
from nftproxy.compiler.store import ElementStore
from nftproxy.model.types import Skipped
from nftproxy.nft.objects import Family, Key, Slot, Table
from nftproxy.nft.transaction import Transaction

AFFINITY_SETS = (names.AFFINITY_SERVICES, names.AFFINITY_NODEPORTS)


class Assembly:
    def __init__(self, family: Family, config: ProxyConfig) -> None:
        self.family = family
        self.config = config
        self.log = ChangeLog()
        self.store = ElementStore(self.log)
        self.claims = Claims(self.store.fragments)
        self.render = Renderer(family, config)

    # -- updating ------------------------------------------------------------------------
    def put(self, key: str, fragment: Fragment | None) -> None:
        """Replace Service ``key``'s fragment (None: the Service is gone from this family). A
        frontend another Service also claims goes to one of them (claims.py), and only that
        frontend: each Service whose holdings the change moved is programmed again, trimmed."""
        claims, store = self.claims, self.store
        old = claims.whole(key)
        if old is None and fragment is None:  # not in this family, before or now
            return
        store.remove(key)
        moved = claims.release(old) if old is not None else set()
        if fragment is not None:
            moved |= claims.take(fragment)
        moved.discard(key)
        for other in moved:  # out first: the store holds one value per element
            store.remove(other)
        if fragment is not None:
            store.add(claims.trimmed(key) if key in claims.losers else fragment)
        for other in sorted(moved):
            store.add(claims.trimmed(other))

    @property
    def tracking(self) -> bool:
        return self.log.enabled

    @tracking.setter
    def tracking(self, on: bool) -> None:
        self.log.enabled = on

    def commit(self) -> None:
        """The kernel now holds this state (after a successful delta or full sync)."""
        self.log.clear()

    # -- reading -------------------------------------------------------------------------
    @property
    def fragments(self) -> dict[str, Fragment]:
        return self.store.fragments

    @property
    def objects(self) -> dict[Obj, int]:
        return self.store.objects

    def skipped(self) -> list[Skipped]:
        return self.claims.skipped()

    def table(self, expand: bool = True) -> Table:
        return self.render.table(self.store, expand)

    def delta(self) -> Transaction:
        return self.render.delta(self.store, self.log)

    def chain_names(self) -> set[str]:
        return self.render.chain_names(self.store)

    def content_lines(self) -> Iterator[str]:
        return self.render.content_lines(self.store)

    def element_count(self) -> int:
        return self.store.element_count() + sum(map(len, self.render.static.values()))

    # -- what the cleanups after a sync need ---------------------------------------------
    def udp_changed(self) -> list[Key]:
        """UDP frontends whose serving endpoints changed since the last successful sync."""
        serving = self.store.udp_serving
        return [k for k, before in self.log.udp.items() if serving.get(k) != before]

    def udp_gone(self) -> list[Key]:
        """UDP frontends on an address (ClusterIP, externalIP, LoadBalancer IP) gone since the last
        successful sync: their Service, or its port, deleted (a NodePort's are matched by port
        number alone, and left out, as kube-proxy does)."""
        serving = self.store.udp_serving
        return [k for k, before in self.log.udp.items() if before is not None and len(k) == 3 and k not in serving]

    def affinity_changed(self) -> bool:
        """Did an affinity frontend appear, go or change timeout, or an endpoint of one change?
        (Then the records of the Service ports whose endpoints changed are checked: stale.py.)"""
        touched = self.log.touched_sets()
        if any(name in touched for name in AFFINITY_SETS):
            return True
        values = self.store.values
        by_width = {2: names.AFFINITY_NODEPORTS, 3: names.AFFINITY_SERVICES}  # by the frontend key's length
        return any(
            (by_width[len(key)], key) in values if key else balancing.rr_sticky(map_name)  # round-robin: by its map
            for map_name, key in self.log.spreads
        )

    def endpoints_of(self, frontend: Key) -> set[Slot]:
        """Every endpoint a frontend's packets may be sent to (any endpoint map)."""
        maps = names.NODEPORT_ENDPOINT_MAPS if len(frontend) == 2 else names.IP_ENDPOINT_MAPS
        out: set[Slot] = set()
        spreads = self.store.spreads
        for kind, n in self.store.objects:
            base, tag = balancing.split_kind(kind)  # any load-balancing algorithm's maps
            for prefix in maps.get(base, ()):
                values = spreads.get((balancing.name(prefix, tag, n), frontend))
                if values:
                    out.update(values)
        rr = (balancing.RR_NODEPORTS, balancing.RR_LOCAL_NODEPORTS) if len(frontend) == 2 else (
            balancing.RR_SERVICES, balancing.RR_LOCAL_SERVICES)  # fmt: skip
        for vmap in rr:  # round-robin: the frontend's own maps (keyed by slot only)
            el = self.store.values.get((vmap, frontend))
            if el is not None and el.value:
                out.update(spreads.get((el.value[0].removeprefix("goto "), ()), ()))
        return out
