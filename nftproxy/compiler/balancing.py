"""Load-balancing algorithms: ``nftproxy.io/load-balancing: random | round-robin | source-hash | maglev``.

* random (the default, kube-proxy's): ``numgen random mod N`` picks the slot; the per-count
  objects (``endpoints-N``, ``load-balance-N``, …) are shared by every Service with N endpoints.
* source-hash: ``jhash <ip> saddr mod N`` picks the slot: the same client address always gets the
  same slot, so the same endpoint while the endpoint list is unchanged; no kernel state. Shared
  per-count objects too, with an ``sh-`` infix (``endpoints-sh-N``, ``load-balance-sh-N``, …).
  (The maps are declared ``typeof … numgen random mod N``: the slot key has the same type, a
  32-bit integer, and nft 1.0.6 crashes listing a ``typeof … jhash`` map.)
* maglev: ``jhash <ip> saddr mod M`` picks one of M slots (``nftproxy.io/maglev-table-size``, a
  prime, default 251) of the Service port's Maglev table (maglev.py): a change of one endpoint
  moves few clients of the others, where source-hash's ``mod N`` moves most. The objects of
  source-hash with the ``mg`` infix, and M in place of N (``endpoints-mg-M``,
  ``load-balance-mg-M``, …): shared by every maglev Service with an M-slot table, each frontend's
  M elements in them. A Service port with one endpoint uses the plain objects (``endpoints-1``).
* round-robin: ``numgen inc mod N``: a counter per rule. Shared per-count chains would share the
  counter between Services (two Services taking turns would each stay on one endpoint), so each
  round-robin Service port gets ONE map and ONE chain of its own, ``rr-<tag>-N`` (the chain: the
  affinity lookup when the Service has sessionAffinity, then ``dnat to numgen inc mod N map
  @rr-<tag>-N``; the map: slot -> endpoint, N elements). Its ClusterIP, external IPs and NodePort
  share that counter. They reach it through five shared entry chains (``cluster-rr``,
  ``external-rr``, ``external-local-rr``, ``nodeport-rr``, ``nodeport-local-rr``: masquerade and
  the traffic policies, as their random counterparts) and four shared verdict maps
  (``rr-services``, ``rr-nodeports``: frontend -> the Service's chain; ``rr-local-services``,
  ``rr-local-nodeports``: the chain of its node-local endpoints, for Local traffic policies).
  Each map is bound by one rule (the kernel walks a map's elements for each rule binding it).

The per-count kinds of skeleton.py carry the algorithm as ``kind@tag`` (``lb@sh``, ``lb@rr1f…``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from nftproxy.compiler.names import (
    MAGLEV_TAG,
    PORT_TAG,
    RR_LOCAL_NODEPORTS,
    RR_LOCAL_SERVICES,
    RR_NODEPORTS,
    RR_SERVICES,
    SOURCE_HASH_TAG,
    port_tag,
)  # fmt: skip
from nftproxy.model.balancing import (
    ALGORITHMS,
    ANNOTATION,
    MAGLEV,
    RANDOM,
    ROUND_ROBIN,
    SOURCE_HASH,
    TABLE_SIZE_ANNOTATION,
    from_annotations,
)  # fmt: skip
from nftproxy.nft.objects import Chain, Family, Set

__all__ = [
    "ALGORITHMS", "ANNOTATION", "MAGLEV", "RANDOM", "ROUND_ROBIN", "RR_LOCAL_NODEPORTS", "RR_LOCAL_SERVICES",
    "RR_NODEPORTS", "RR_SERVICES", "SOURCE_HASH", "TABLE_SIZE_ANNOTATION", "from_annotations",
]  # fmt: skip
SEED = "0x6e667078"  # fixed: the same client maps to the same slot on every node and after restarts
_HASHED = (SOURCE_HASH_TAG, MAGLEV_TAG)  # tags whose slot is a hash of the client address


def tag(algorithm: str, service: str, port: str, proto: str, sticky: bool = False) -> str:
    """The name infix of an algorithm's objects ("" for random). A round-robin tag is per Service
    port; flag ``s``: the Service has sessionAffinity (its chain looks the client up first)."""
    if algorithm == SOURCE_HASH:
        return SOURCE_HASH_TAG
    if algorithm == MAGLEV:
        return MAGLEV_TAG
    if algorithm == ROUND_ROBIN:
        return f"{port_tag(service, port, proto)}{'s' if sticky else ''}"
    return ""


def algorithm_of(t: str) -> str:
    """The algorithm of a per-count object's tag ("" random, ``sh``, ``mg``, else round-robin)."""
    return {"": RANDOM, SOURCE_HASH_TAG: SOURCE_HASH, MAGLEV_TAG: MAGLEV}.get(t, ROUND_ROBIN)


def split_kind(kind: str) -> tuple[str, str]:
    """``lb@sh`` -> ("lb", "sh"); ``lb`` -> ("lb", "")."""
    base, _, t = kind.partition("@")
    return base, t


def with_tag(kind: str, t: str) -> str:
    return f"{kind}@{t}" if t else kind


def name(base: str, t: str, n: int) -> str:
    """A per-count object's name: ``cluster-3``, ``cluster-sh-3``, ``cluster-rr1f…-3``."""
    return f"{base}-{t}-{n}" if t else f"{base}-{n}"


def slot_expression(t: str, ip: str, n: int) -> str:
    if t in _HASHED:
        return f"jhash {ip} saddr mod {n} seed {SEED}"
    return f"numgen random mod {n}"


_NUMGEN = re.compile(r"numgen random mod (\d+)")


def retag(sets: list[Set], chains: list[Chain], t: str, n: int, ip: str) -> tuple[list[Set], list[Chain]]:
    """The objects of a random kind, renamed for tag ``t`` and with its slot expression in the
    DNAT rules (the maps' declared key type stays ``numgen random mod N``: see module doc; for
    maglev ``n`` is the table's M)."""
    suffix = f"-{n}"
    names = [s.name for s in sets] + [c.name for c in chains]
    renames = {x: name(x[: -len(suffix)], t, n) for x in names if x.endswith(suffix)}
    expr = slot_expression(t, ip, n)

    def rule(text: str) -> str:
        words = [
            "@" + renames[w[1:]] if w.startswith("@") and w[1:] in renames else renames.get(w, w)
            for w in text.split(" ")
        ]
        text = " ".join(words)
        if " dnat " in f" {text}" and "@affinity" not in text:
            text = _NUMGEN.sub(expr, text)
        return text

    comment = algorithm_of(t)
    new_sets = [
        replace(s, name=renames.get(s.name, s.name), comment=f"{s.comment} ({comment})" if s.comment else comment)
        for s in sets
    ]
    new_chains = [replace(c, name=renames.get(c.name, c.name), rules=tuple(rule(r) for r in c.rules)) for c in chains]
    return new_sets, new_chains


# -- round-robin: one map and one chain per Service port, shared entry chains --------------

RR_ENTRY = "rr-entry"  # the kind of the shared entry chains and verdict maps (N = 0)
RR = "rr"  # kind "rr:<tag>", N: the Service port's own map and chain
RR_VMAPS = (RR_SERVICES, RR_NODEPORTS, RR_LOCAL_SERVICES, RR_LOCAL_NODEPORTS)


def rr_kind(t: str) -> str:
    return f"{RR}:{t}"


def rr_name(t: str, n: int) -> str:
    return f"rr-{t}-{n}"


def sticky_tag(t: str) -> bool:
    """Does this round-robin tag's Service have sessionAffinity (flag ``s`` after the digest)?"""
    return "s" in t[PORT_TAG:]


def rr_sticky(map_name: str) -> bool:
    """Does this round-robin map's Service have sessionAffinity?"""
    return map_name.startswith("rr-") and sticky_tag(map_name[3:].rsplit("-", 1)[0])


def local_tag(t: str) -> str:
    """The tag of a round-robin Service port's node-local list (Local policies): flag ``l``."""
    return f"{t}l"


def rr_local(map_name: str) -> bool:
    """Is this round-robin map a Service port's node-local endpoint list (flag ``l``: Local policies)?"""
    return map_name.startswith("rr-") and "l" in map_name[3:].rsplit("-", 1)[0][PORT_TAG:]


def rr_objects(
    family: Family, kind: str, n: int, masquerade: str | None, local: str | None, sticky_rules: tuple[str, ...]
) -> tuple[list[Set], list[Chain]]:
    ip = family.value
    if kind == RR_ENTRY:
        key, np_key = f"{ip} daddr . meta l4proto . th dport", "meta l4proto . th dport"
        sets = [
            Set(RR_SERVICES, f"typeof {key} : verdict", (), comment="round-robin frontends"),
            Set(RR_NODEPORTS, f"typeof {np_key} : verdict", (), comment="round-robin NodePorts"),
            Set(RR_LOCAL_SERVICES, f"typeof {key} : verdict", (),
                comment="round-robin frontends, Local policy: this node's endpoints"),
            Set(RR_LOCAL_NODEPORTS, f"typeof {np_key} : verdict", (),
                comment="round-robin NodePorts, Local policy: this node's endpoints"),
        ]  # fmt: skip

        def local_policy(k: str, all_map: str, local_map: str) -> tuple[str, ...]:
            pod = (f"{local} {k} vmap @{all_map}",) if local else ()
            return (*pod, "fib saddr type local jump mark-for-masquerade", f"fib saddr type local {k} vmap @{all_map}",
                    f"{k} vmap @{local_map}", "drop")  # fmt: skip

        masq = (masquerade,) if masquerade else ()
        chains = [
            Chain("cluster-rr", (*masq, f"{key} vmap @{RR_SERVICES}")),
            Chain("external-rr", ("jump mark-for-masquerade", f"{key} vmap @{RR_SERVICES}")),
            Chain("external-local-rr", local_policy(key, RR_SERVICES, RR_LOCAL_SERVICES)),
            Chain("nodeport-rr", ("jump mark-for-masquerade", f"{np_key} vmap @{RR_NODEPORTS}")),
            Chain("nodeport-local-rr", local_policy(np_key, RR_NODEPORTS, RR_LOCAL_NODEPORTS)),
        ]
        return sets, chains
    t = kind.split(":", 1)[1]
    name = rr_name(t, n)
    the_map = Set(name, f"typeof numgen inc mod {n} : {ip} daddr . th dport", comment=f"round-robin: one of {n}")
    dnat = f"meta l4proto {{ tcp, udp, sctp }} dnat {ip} to numgen inc mod {n} map @{name}"
    return [the_map], [Chain(name, (*sticky_rules, dnat) if sticky_tag(t) else (dnat,))]
