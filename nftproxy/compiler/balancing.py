"""Load-balancing algorithms: ``nftproxy.io/load-balancing: random | round-robin | source-hash``.

* random (the default, kube-proxy's): ``numgen random mod N`` picks the slot; the per-count
  objects (``endpoints-N``, ``load-balance-N``, …) are shared by every Service with N endpoints.
* source-hash: ``jhash <ip> saddr mod N`` picks the slot: the same client address always gets the
  same slot, so the same endpoint while the endpoint list is unchanged; no kernel state. Shared
  per-count objects too, with an ``sh-`` infix (``endpoints-sh-N``, ``load-balance-sh-N``, …).
  (The maps are declared ``typeof … numgen random mod N``: the slot key has the same type, a
  32-bit integer, and nft 1.0.6 crashes listing a ``typeof … jhash`` map.)
* round-robin: ``numgen inc mod N``: a counter per rule. Shared per-count chains would share the
  counter between Services (two Services taking turns would each stay on one endpoint), so each
  round-robin Service port gets objects of its own, tagged ``rr<hash>`` (``endpoints-rr<hash>-N``,
  ``load-balance-rr<hash>-N``, …): a bounded number per Service, each map bound by one rule.

The per-count kinds of skeleton.py carry the algorithm as ``kind@tag`` (``lb@sh``, ``lb@rr1f…``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

from nftproxy.model.balancing import ALGORITHMS, ANNOTATION, RANDOM, ROUND_ROBIN, SOURCE_HASH, from_annotations
from nftproxy.nft.objects import Chain, Set

__all__ = ["ALGORITHMS", "ANNOTATION", "from_annotations"]
SEED = "0x6e667078"  # fixed: the same client maps to the same slot on every node and after restarts


def tag(algorithm: str, service: str, port: str, proto: str) -> str:
    """The name infix of an algorithm's objects ("" for random)."""
    if algorithm == SOURCE_HASH:
        return "sh"
    if algorithm == ROUND_ROBIN:
        return "rr" + hashlib.sha256(f"{service}/{port}/{proto}".encode()).hexdigest()[:10]
    return ""


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
    if t == "sh":
        return f"jhash {ip} saddr mod {n} seed {SEED}"
    if t.startswith("rr"):
        return f"numgen inc mod {n}"
    return f"numgen random mod {n}"


def algorithm_of(t: str) -> str:
    return SOURCE_HASH if t == "sh" else ROUND_ROBIN if t.startswith("rr") else RANDOM


_NUMGEN = re.compile(r"numgen random mod (\d+)")


def retag(sets: list[Set], chains: list[Chain], t: str, n: int, ip: str) -> tuple[list[Set], list[Chain]]:
    """The objects of a random kind, renamed for tag ``t`` and with its slot expression in the
    DNAT rules (the maps' declared key type stays ``numgen random mod N``: see module doc)."""
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

    comment = {"sh": "source-hash", "": "random"}.get(t, "round-robin")
    new_sets = [
        replace(s, name=renames.get(s.name, s.name), comment=f"{s.comment} ({comment})" if s.comment else comment)
        for s in sets
    ]
    new_chains = [replace(c, name=renames.get(c.name, c.name), rules=tuple(rule(r) for r in c.rules)) for c in chains]
    return new_sets, new_chains
