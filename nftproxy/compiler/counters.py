"""Per-Service traffic counters (``--service-counters``): what the table holds when they are on.

Every count is an nftables counter carried by a set element (a set declared with ``counter``),
so the number of sets and chains stays fixed whatever the number of Services, and one listing of
a few sets reads them all (diagnose/counters.py):

* ``service-traffic`` / ``nodeport-traffic``: the packets and bytes, both ways, of every
  connection DNATed to a Service port's frontend (ClusterIP, externalIP, LoadBalancer IP . proto
  . port; proto . NodePort), matched by the connection's original destination;
* ``service-connections`` / ``nodeport-connections``: its new connections (the first packet of a
  conntrack entry, once: ``ct status ! confirmed``);
* ``no-endpoint-services`` / ``no-endpoint-nodeports`` (the maps that reject or drop a frontend
  without endpoints) get the ``counter`` flag: their packets rejected or dropped.

The counting chains hang off two base chains just after DNAT, in prerouting and output: every
packet of a node passes one of them once (a packet looped back through ``lo`` was counted on its
way out). Each Service port adds one element per frontend to the traffic and connection sets,
whether it has endpoints or not, so its counts survive endpoints coming and going.

With the option off, none of this exists and the table is byte for byte the one without it.
"""

from __future__ import annotations

from dataclasses import replace

from nftproxy.compiler import names
from nftproxy.nft.objects import Chain, Element, Family, Hook, Key, Set

PROTOS = ("tcp", "udp", "sctp")
_FRONTEND = "typeof {ip} daddr . meta l4proto . th dport"
_NODEPORT = "typeof meta l4proto . th dport"
_ORIGINAL = "ct original {ip} daddr . meta l4proto . ct original proto-dst"  # the frontend a packet went to
_ORIGINAL_NODEPORT = "ct original {ip} daddr @nodeport-ips meta l4proto . ct original proto-dst"

SETS = (
    (names.SERVICE_TRAFFIC, _FRONTEND, "Service IP . proto . port: packets and bytes, both ways"),
    (names.NODEPORT_TRAFFIC, _NODEPORT, "NodePorts: packets and bytes, both ways"),
    (names.SERVICE_CONNECTIONS, _FRONTEND, "Service IP . proto . port: new connections"),
    (names.NODEPORT_CONNECTIONS, _NODEPORT, "NodePorts: new connections"),
)

BASE_CHAINS = (
    (
        names.COUNT_PREROUTING,
        Hook("filter", "prerouting", -90, "-90: after DNAT (-100); counts Service traffic, both ways (lo: in output)"),
        ('iif != "lo" ct status dnat jump ' + names.SERVICE_COUNTERS,),
    ),
    (
        names.COUNT_OUTPUT,
        Hook("filter", "output", -90, "-90: after nat-output's DNAT (-100); counts the node's own Service traffic"),
        ("ct status dnat jump " + names.SERVICE_COUNTERS,),
    ),
)


def _fill(text: str, family: Family) -> str:
    return text.replace("{ip}", family.value)


def sets(family: Family) -> list[Set]:
    """The four counting sets: each element counts for one frontend."""
    return [Set(name, _fill(spec, family), comment=what, counter=True) for name, spec, what in SETS]


def counted(s: Set) -> Set:
    """A base set as declared with counters on: the no-endpoint maps count what they refuse."""
    return replace(s, counter=True) if s.name in names.COUNTED_MAPS else s


def count_rules(family: Family, proto: str) -> tuple[str, ...]:
    """One protocol's counting rules (nft types ``proto-dst`` only once the protocol is known): a
    new connection, then every packet; a Service IP's packet returns before the NodePort rules,
    so a ClusterIP port that shares a NodePort's number is counted once, as the ClusterIP's."""
    new, p = "ct status ! confirmed ", f"meta l4proto {proto} "
    original, nodeport = _fill(_ORIGINAL, family), _fill(_ORIGINAL_NODEPORT, family)
    return (
        f"{new}{p}{original} @{names.SERVICE_CONNECTIONS}",
        f"{p}{original} @{names.SERVICE_TRAFFIC} return",
        f"{new}{p}{nodeport} @{names.NODEPORT_CONNECTIONS}",
        f"{p}{nodeport} @{names.NODEPORT_TRAFFIC}",
    )


def chains(family: Family) -> list[Chain]:
    """The two base chains after DNAT, ``service-counters`` and one ``count-<proto>`` each."""
    out = [Chain(name, rules, hook) for name, hook, rules in BASE_CHAINS]
    out.append(Chain(names.SERVICE_COUNTERS, tuple(f"meta l4proto {p} jump {names.count_chain(p)}" for p in PROTOS)))
    out += [Chain(names.count_chain(p), count_rules(family, p)) for p in PROTOS]
    return out


def digest_part(family: Family) -> tuple[object, ...]:
    """What the table comment's digest adds with counters on: a table with them and one without
    are never adopted for one another (their sets are declared apart)."""
    return ("service-counters", sets(family), names.COUNTED_MAPS, chains(family))


def elements(
    cluster: Key, externals: tuple[Key, ...], node_port: Key | None, comment: str
) -> list[tuple[str, Element]]:
    """One Service port's counting elements: one per frontend in the traffic sets (with the
    Service port's name, as its dispatch element) and in the connection sets."""
    out = []
    for key in (cluster, *externals):
        out.append((names.SERVICE_TRAFFIC, Element(key, None, comment)))
        out.append((names.SERVICE_CONNECTIONS, Element(key)))
    if node_port is not None:
        out.append((names.NODEPORT_TRAFFIC, Element(node_port, None, comment)))
        out.append((names.NODEPORT_CONNECTIONS, Element(node_port)))
    return out
