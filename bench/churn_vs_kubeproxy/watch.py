"""When each newly ready address first shows in a committed nftables object of the namespace."""

from __future__ import annotations

import time

from testkit.lab.nftwatch import _NEWSETELEM, NFNL_SUBSYS_NFTABLES, _messages, _Watch

_NEWRULE = (NFNL_SUBSYS_NFTABLES << 8) | 6
_NEWCHAIN = (NFNL_SUBSYS_NFTABLES << 8) | 3


class AddressWatch(_Watch):
    """When each awaited address (4 bytes) first showed in a committed nftables object of the
    namespace: a new element (nftproxy's endpoint maps; kube-proxy's service chain vmap holds
    the endpoint chain's name, whose dnat rule holds the address), a new rule or a new chain."""

    def __init__(self, netns: str) -> None:
        super().__init__(netns)
        self.wanted: dict[bytes, float] = {}  # needle -> when awaited (perf_counter)
        self.seen: dict[bytes, float] = {}
        self._thread.start()

    def expect(self, needle: bytes) -> None:
        with self._cond:
            self.wanted[needle] = time.perf_counter()

    def pending(self) -> int:
        with self._cond:
            return len(self.wanted)

    def _chunk(self, data: bytes, now: float) -> None:
        with self._cond:
            wanted = [n for n in self.wanted if n in data]
        if not wanted:
            return
        found: set[bytes] = set()
        for mtype, msg in _messages(data):
            if mtype in (_NEWSETELEM, _NEWRULE, _NEWCHAIN):
                found.update(n for n in wanted if n in msg)
        with self._cond:
            for n in found:
                if self.wanted.pop(n, None) is not None:
                    self.seen[n] = now
