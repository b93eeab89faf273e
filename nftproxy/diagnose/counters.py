"""Per-Service traffic counters read back (``--service-counters``, compiler/counters.py): one
listing of the counting sets, the no-endpoint maps and ``cluster-ips``, summed per Service port,
protocol and kind of frontend. The metrics (operator/metrics.py), ``nftproxy explain`` and
``nftproxy list`` all read them through ``read``.

A Service port is named by its elements' comment (``namespace/name:port``, ``namespace/name``
for an unnamed port), which the compiler writes. Reading touches nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nftproxy.compiler import names
from nftproxy.nft.backend import Backend
from nftproxy.nft.listing import CountedElement
from nftproxy.nft.objects import Family, Key, Set

CLUSTER_IP, NODE_PORT, EXTERNAL = "ClusterIP", "NodePort", "External"  # the kind of a frontend
REJECT, DROP = "reject", "drop"  # what a frontend without endpoints does to a packet

# what is listed: (keyword, name); the maps are the no-endpoint ones
LISTED = (
    *(Set(n, "typeof ?") for n in names.TRAFFIC_SETS),
    *(Set(n, "typeof ? : verdict") for n in names.COUNTED_MAPS),
    Set(names.CLUSTER_IPS, "typeof ?"),
)


@dataclass(frozen=True, order=True)
class PortKey:
    """One Service port's frontends of one kind (externalIPs and LoadBalancer IPs summed)."""

    namespace: str
    service: str
    port: str  # the port's name ("" for the one unnamed port of a Service)
    protocol: str  # TCP | UDP | SCTP
    kind: str  # ClusterIP | NodePort | External


@dataclass
class PortCounts:
    packets: int = 0  # of its connections, both ways
    bytes: int = 0
    connections: int = 0  # new connections
    rejected: int = 0  # packets refused for lack of endpoints (connection refused)
    dropped: int = 0  # packets dropped for lack of endpoints here (a Local policy)
    refusing: str | None = None  # REJECT / DROP: the port has no endpoints (here) now


def service_port(comment: str | None) -> tuple[str, str, str] | None:
    """``default/web:http`` -> (default, web, http); ``default/web`` -> (default, web, "")."""
    if not comment or "/" not in comment:
        return None
    namespace, _, rest = comment.partition("/")
    service, _, port = rest.partition(":")
    return namespace, service, port


def tally(listed: Mapping[str, Iterable[CountedElement]]) -> dict[PortKey, PortCounts]:
    """The counts of each Service port and kind, from the elements of ``LISTED``."""
    cluster_ips = {e.key[0] for e in listed.get(names.CLUSTER_IPS, ())}

    def key_of(el: CountedElement, comment: str | None) -> PortKey | None:
        sp = service_port(comment)
        if sp is None:
            return None
        if len(el.key) == names.NODEPORT_FRONTEND:
            kind = NODE_PORT
        else:
            kind = CLUSTER_IP if el.key[0] in cluster_ips else EXTERNAL
        return PortKey(*sp, el.key[-2].upper(), kind)

    out: dict[PortKey, PortCounts] = {}
    comments: dict[tuple[str, ...], str | None] = {}  # frontend -> its Service port (traffic sets)
    for set_name in (names.SERVICE_TRAFFIC, names.NODEPORT_TRAFFIC):
        for el in listed.get(set_name, ()):
            comments[el.key] = el.comment
            k = key_of(el, el.comment)
            if k is not None:
                c = out.setdefault(k, PortCounts())
                c.packets += el.packets
                c.bytes += el.bytes
    for set_name in (names.SERVICE_CONNECTIONS, names.NODEPORT_CONNECTIONS):
        for el in listed.get(set_name, ()):
            k = key_of(el, comments.get(el.key))
            if k is not None:
                out.setdefault(k, PortCounts()).connections += el.packets
    for set_name in names.COUNTED_MAPS:
        for el in listed.get(set_name, ()):
            k = key_of(el, el.comment)
            if k is None:
                continue
            c = out.setdefault(k, PortCounts())
            if el.value == ("drop",):
                c.dropped += el.packets
                c.refusing = DROP
            else:
                c.rejected += el.packets
                c.refusing = REJECT
    return out


def read(backend: Backend, family: Family, table: str) -> dict[PortKey, PortCounts]:
    """The kernel's counts ({} without the table, or without counters in it)."""
    return tally(backend.counted_elements(family, table, LISTED))


def per_frontend(listed: Mapping[str, Iterable[CountedElement]]) -> dict[Key, PortCounts]:
    """The counts of each frontend (Service IP . proto . port, proto . NodePort) apart."""
    out: dict[Key, PortCounts] = {}
    for set_name in (names.SERVICE_TRAFFIC, names.NODEPORT_TRAFFIC):
        for el in listed.get(set_name, ()):
            c = out.setdefault(el.key, PortCounts())
            c.packets, c.bytes = el.packets, el.bytes
    for set_name in (names.SERVICE_CONNECTIONS, names.NODEPORT_CONNECTIONS):
        for el in listed.get(set_name, ()):
            out.setdefault(el.key, PortCounts()).connections = el.packets
    for set_name in names.COUNTED_MAPS:
        for el in listed.get(set_name, ()):
            c = out.setdefault(el.key, PortCounts())
            if el.value == ("drop",):
                c.dropped, c.refusing = el.packets, DROP
            else:
                c.rejected, c.refusing = el.packets, REJECT
    return out


def counting(listed: Mapping[str, Iterable[CountedElement]]) -> bool:
    """Does the table count (--service-counters)? Its traffic sets are there."""
    return names.SERVICE_TRAFFIC in listed


def read_families(backend: Backend, table: str) -> dict[str, dict[PortKey, PortCounts]]:
    """Both families' counts, by the ip_family label's value (IPv4, IPv6)."""
    return {f"IPv{f.version}": read(backend, f, table) for f in Family}


def as_json(c: PortCounts) -> dict[str, int]:
    return {"connections": c.connections, "packets": c.packets, "bytes": c.bytes,
            "rejected": c.rejected, "dropped": c.dropped}  # fmt: skip


def describe(c: PortCounts) -> str:
    """``12 connections, 80 packets, 6.1 KB; 3 rejected`` (what explain and list print)."""
    text = f"{c.connections} connections, {c.packets} packets, {_size(c.bytes)}"
    refused = [f"{n} {what}" for n, what in ((c.rejected, "rejected"), (c.dropped, "dropped")) if n]
    return text + ("; " + ", ".join(refused) + " (no endpoints)" if refused else "")


def _size(n: int) -> str:
    if n < 1000:
        return f"{n} B"
    x = float(n)
    for unit in ("KB", "MB"):
        x /= 1000
        if x < 1000:
            return f"{x:.1f} {unit}"
    return f"{x / 1000:.1f} GB"
