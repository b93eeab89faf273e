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

from collections.abc import Iterable

from nftproxy.compiler.assembly import Assembly
from nftproxy.nft.objects import DynamicElement, Key, Slot, UdpFlow


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
