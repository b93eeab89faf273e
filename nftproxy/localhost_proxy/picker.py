"""Which endpoint a new connection of one localhost NodePort listener tries, in order, and the
ClientIP affinity records: pure (no I/O; the random source and the clock are given)."""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Iterator

from nftproxy.compiler import maglev
from nftproxy.compiler.balancing import MAGLEV, ROUND_ROBIN, SOURCE_HASH
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.model.balancing import DEFAULT_TABLE_SIZE
from nftproxy.nft.objects import Slot

PINS = 4096  # affinity records kept before the expired ones are dropped


def client_hash(address: str) -> int:
    """source-hash: a stable hash of the client address (the same on every run)."""
    return zlib.crc32(address.encode())


class Picker:
    """The endpoints a new connection of one listener tries, in order; the affinity records."""

    def __init__(
        self, spec: LocalhostNodePort, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rng = rng or random.Random()
        self.clock = clock
        self.turn = 0  # round-robin: the next slot
        self.pins: dict[str, tuple[Slot, float]] = {}  # ClientIP affinity: client -> (endpoint, last served)
        self.spec = spec
        self.members = frozenset(spec.endpoints)

    def update(self, spec: LocalhostNodePort) -> None:
        """A new endpoint list or policy. A record whose endpoint is gone is ignored (and
        dropped when met); a new affinity timeout drops them all, as upstream."""
        if spec.affinity != self.spec.affinity:
            self.pins.clear()
        self.spec = spec
        self.members = frozenset(spec.endpoints)

    def candidates(self, client: str) -> Iterator[Slot]:
        """The endpoints for one connection from ``client``, best first, each at most once:
        its live affinity record's endpoint, then the algorithm's pick, then the others in the
        algorithm's order (round-robin and source-hash: the following slots; maglev: the
        endpoints of the following slots of its table; random: a random order). Lazy: the retry
        order is only worked out when a retry happens."""
        eps = self.spec.endpoints
        n = len(eps)
        if n == 0:
            return
        pinned = self._pinned(client)
        if pinned is not None:
            yield pinned
        algorithm = self.spec.algorithm
        if algorithm == ROUND_ROBIN:
            start = self.turn % n
            self.turn = start + 1  # one turn per connection, not per retry (numgen inc per new flow)
            order: Iterator[Slot] = (eps[(start + i) % n] for i in range(n))
        elif algorithm == SOURCE_HASH:
            start = client_hash(client) % n
            order = (eps[(start + i) % n] for i in range(n))
        elif algorithm == MAGLEV and n > 1:  # the table's pick, as the kernel's over the same table
            slots = maglev.table(eps, self.spec.table_size or DEFAULT_TABLE_SIZE)
            start = client_hash(client) % len(slots)
            order = iter(dict.fromkeys(slots[(start + i) % len(slots)] for i in range(len(slots))))
        else:
            order = self._random(eps)
        for ep in order:
            if ep != pinned:
                yield ep

    def _random(self, eps: tuple[Slot, ...]) -> Iterator[Slot]:
        first = self.rng.randrange(len(eps))
        yield eps[first]
        rest = [e for i, e in enumerate(eps) if i != first]
        self.rng.shuffle(rest)
        yield from rest

    def _pinned(self, client: str) -> Slot | None:
        timeout = self.spec.affinity
        if not timeout:
            return None
        record = self.pins.get(client)
        if record is None:
            return None
        ep, last = record
        if self.clock() - last <= timeout and ep in self.members:
            return ep
        del self.pins[client]
        return None

    def served(self, client: str, ep: Slot) -> None:
        """``ep`` accepted ``client``'s connection: its affinity record (renewed)."""
        timeout = self.spec.affinity
        if not timeout:
            return
        now = self.clock()
        if len(self.pins) >= PINS:  # bounded: drop the expired ones
            self.pins = {c: r for c, r in self.pins.items() if now - r[1] <= timeout}
        self.pins[client] = (ep, now)
