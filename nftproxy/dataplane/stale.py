"""After every successful sync: what the packet path still holds that the new state no longer
allows, worked out from the current state (not from what one delta removed), so it also holds
after a restart, a failed sync or an `apply` from a new process.

* UDP conntrack entries: as kube-proxy's CleanStaleEntries, an entry DNATed from a UDP frontend
  to an address that is not one of the port's serving endpoints is deleted; unlike it, while the
  port has a ready endpoint a terminating one keeps no flows under a Cluster policy (compiler/
  fragment.py ``_udp_serving``: the DNS-rollout outage). A port with no serving endpoint loses the flows to its
  ClusterIP, externalIPs and LoadBalancer IPs, but not to its NodePort (kube-proxy v1.37,
  compiler/fragment.py ``_udp_serving``). A Service deleted (or its UDP port removed) loses the
  flows to its ClusterIP, externalIPs and LoadBalancer IPs too (kube-proxy 1.38, kubernetes#141371;
  followed whatever the cluster's version: a client of a deleted Service otherwise keeps reaching
  its pods for as long as it sends).
* ClientIP affinity records (one dynamic map per Service port and endpoint list, see
  compiler/names.py): a record whose endpoint the Service port no longer uses is deleted, and
  the client is balanced again at its next packet. A Service port that loses its affinity, or
  whose timeout changes, loses its map (the timeout is in its name): kube-proxy, too, stops
  honouring affinity at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass

from nftproxy.compiler import names
from nftproxy.compiler.assembly import Assembly
from nftproxy.nft.backend import Backend, NftError
from nftproxy.nft.conntrack import Conntrack
from nftproxy.nft.objects import DynamicElement, Family, Key, Slot, UdpFlow
from nftproxy.nft.transaction import Transaction

log = logging.getLogger("nftproxy.dataplane")


def stale_udp_flows(
    a: Assembly, flows: Iterable[UdpFlow], frontends: Iterable[Key] | None = None, gone: Iterable[Key] = ()
) -> list[UdpFlow]:
    """The flows to delete; ``frontends``: only flows of these (None: of every UDP frontend);
    ``gone``: address frontends deleted since the last sync (Assembly.udp_gone), all of whose
    flows are stale."""
    serving = a.store.udp_serving
    wanted = None if frontends is None else set(frontends)
    deleted = set(gone)
    out = []
    for f in flows:
        key: Key = (f.orig_dst, "udp", f.orig_dport)
        if key in deleted:
            out.append(f)
            continue
        if key not in serving:
            key = ("udp", f.orig_dport)  # a NodePort, on any of the node's addresses
        ips = serving.get(key)
        if ips is None or (wanted is not None and key not in wanted):
            continue
        if (f"{f.reply_src}|{f.reply_sport}" if f.reply_sport else f.reply_src) not in ips:
            out.append(f)
    return out


def affinity_records(a: Assembly) -> dict[str, frozenset[Slot]]:
    """Every affinity map of the table -> the endpoints its records may point to."""
    return {name: allowed for frag in a.fragments.values() for name, allowed in frag.affinity}


def stale_affinity(allowed: frozenset[Slot], entries: Iterable[DynamicElement]) -> list[Key]:
    """Keys (client addresses) of one affinity map's records to delete. An IPv6 record holds the
    endpoint's address alone (its port is in the port map, deleted with it)."""
    addrs = {address for address, _ in allowed}
    out = []
    for e in entries:
        ok = tuple(e.value[:2]) in allowed if len(e.value) >= 2 else bool(e.value) and e.value[0] in addrs
        if not ok:
            out.append(e.key)
    return out


@dataclass(frozen=True)
class Cleanup:
    """The stale-entry cleanup after a sync, of one family (the operator's kube-proxy metrics)."""

    family: Family
    conntrack: bool  # the UDP conntrack entries were looked at (else only affinity records)
    seconds: float  # listing and deleting stale UDP conntrack entries
    deleted: int  # conntrack entries deleted
    failed: bool  # the cleanup (conntrack or affinity records) raised: logged, the sync stands


class StaleEntries:
    """Deletes, after each successful sync, the stale UDP conntrack entries and affinity records
    of one table (per family)."""

    def __init__(self, backend: Backend, conntrack: Conntrack | None) -> None:
        self.backend = backend
        self.conntrack = conntrack  # None: stale UDP flows are left to expire
        # the affinity maps after the last cleanup -> their endpoints (release_affinity)
        self.affinity_seen: dict[Family, dict[str, frozenset[Slot]]] = {}

    def clean_up_after(self, a: Assembly, table: str, full: bool) -> Cleanup | None:
        """After a full sync all of them are checked, after a partial one those of what changed.
        Best effort: a failure here never fails the sync (UDP flows and affinity entries also
        expire). Returns what it did (None: nothing to look at)."""
        seconds, deleted, looked, conntrack = 0.0, 0, False, False
        try:
            frontends = None if full else a.udp_changed()
            gone = a.udp_gone()  # a UDP Service (port) deleted: every flow to its addresses
            if self.conntrack is not None and ((a.store.udp_serving and (frontends is None or frontends)) or gone):
                looked = conntrack = True
                start = time.perf_counter()
                flows = self.conntrack.udp_flows(a.family)
                doomed = stale_udp_flows(a, flows, frontends, gone)
                self.conntrack.delete_udp_flows(a.family, doomed)
                seconds, deleted = time.perf_counter() - start, len(doomed)
            if full or a.affinity_changed():
                looked = True
                self.release_affinity(a, table, full)
        except Exception as e:
            log.warning("cleaning up stale %s flows/affinity entries: %s", a.family.value, e)
            return Cleanup(a.family, conntrack, seconds, deleted, True)
        return Cleanup(a.family, conntrack, seconds, deleted, False) if looked else None

    def release_affinity(self, a: Assembly, table: str, full: bool) -> None:
        """Delete the affinity records that point to an endpoint their Service port no longer
        uses: after a full sync every map's, else those of the maps whose endpoints changed."""
        records = affinity_records(a)
        seen = self.affinity_seen.get(a.family, {})
        for name, allowed in records.items():
            if not full and seen.get(name) in (None, allowed):  # new (empty), or unchanged
                continue
            keys = stale_affinity(allowed, self.backend.read_dynamic(a.family, table, name))
            if keys:
                self._delete_records(a.family, table, name, keys)
        self.affinity_seen[a.family] = records

    def _delete_records(self, family: Family, table: str, name: str, keys: list[Key]) -> None:
        maps = [name, names.port_map_of(name)] if family is Family.IP6 else [name]
        tx = Transaction(family, table)
        for m in maps:
            tx.delete_elements(m, keys)
        try:
            self.backend.apply(tx)
        except NftError:  # one expired meanwhile: the others one by one
            for key in keys:
                for m in maps:
                    one = Transaction(family, table)
                    one.delete_elements(m, [key])
                    with suppress(NftError):
                        self.backend.apply(one)
