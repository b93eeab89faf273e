"""After every successful sync: what the packet path still holds that the new state no longer
allows, worked out from the current state (not from what one delta removed), so it also holds
after a restart, a failed sync or an `apply` from a new process.

* UDP conntrack entries: as kube-proxy's CleanStaleEntries, an entry DNATed from a UDP frontend
  to an address that is not one of the port's serving endpoints is deleted (a terminating but
  still serving endpoint keeps its flows; a port with no serving endpoint is left alone).
* ClientIP affinity entries: an entry whose frontend no longer has affinity, whose timeout
  changed, or whose endpoint the frontend no longer uses, is deleted: the client is balanced
  again at its next packet, as kube-proxy stops honouring affinity at once.
"""

from __future__ import annotations

from collections.abc import Iterable

from nftproxy.compiler.assembly import Assembly
from nftproxy.nft.objects import DynamicElement, Key, UdpFlow


def stale_udp_flows(a: Assembly, flows: Iterable[UdpFlow], frontends: Iterable[Key] | None = None) -> list[UdpFlow]:
    """The flows to delete; ``frontends``: only flows of these (None: of every UDP frontend)."""
    serving = a.store.udp_serving
    wanted = None if frontends is None else set(frontends)
    out = []
    for f in flows:
        key: Key = (f.orig_dst, "udp", f.orig_dport)
        if key not in serving:
            key = ("udp", f.orig_dport)  # a NodePort, on any of the node's addresses
        ips = serving.get(key)
        if ips is None or (wanted is not None and key not in wanted):
            continue
        if f.reply_src not in ips:
            out.append(f)
    return out


def stale_affinity(a: Assembly, entries: Iterable[DynamicElement]) -> list[Key]:
    """Keys of the affinity entries (client . frontend IP . proto . port) to delete."""
    out = []
    endpoints: dict[Key, set[tuple[str, str]]] = {}
    for e in entries:
        _, daddr, proto, port = e.key
        frontend: Key = (daddr, proto, port)
        timeout = a.affinity_timeout(frontend)
        if timeout is None:
            frontend = (proto, port)
            timeout = a.affinity_timeout(frontend)
        if timeout is None or timeout != e.timeout:
            out.append(e.key)
            continue
        if frontend not in endpoints:
            endpoints[frontend] = a.endpoints_of(frontend)
        if (e.value[0], e.value[1]) not in endpoints[frontend]:
            out.append(e.key)
    return out
