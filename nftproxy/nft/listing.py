"""nft's listings read back: `nft -j list table` as an adopted Table (names, the table comment,
elements), a dynamic map's elements with their timeouts, named counters, chain names, and the
rules of a terse text listing (`nft -t list table`)."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from nftproxy.nft.objects import Chain, Counter, DynamicElement, Element, Family, Key, Set, Table

_CHAIN = re.compile(r"^\s*chain (\S+) \{\s*$")
_SKIP = re.compile(r"^\s*(type |comment |policy |counter$|\}|$)")
_SET = re.compile(r"^(set|map) \S+ \{")


def parse_rules(listing: str) -> dict[str, tuple[str, ...]]:
    """Chain name -> rules from `nft -t list table …` (terse: no set elements)."""
    chains: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        m = _CHAIN.match(line)
        if m:
            current = chains.setdefault(m.group(1), [])
            continue
        stripped = line.strip()
        if current is None:
            continue
        if stripped == "}":
            current = None
            continue
        if _SKIP.match(line) or _SET.match(stripped):
            continue
        current.append(stripped)
    return {name: tuple(rules) for name, rules in chains.items()}


_TABLE_COMMENT = re.compile(r'^table [^\n]*\{\n\s*comment "([^"]*)"', re.M)


def table_comment(terse: str) -> str:
    """The table comment of a text listing (nft 1.0.6 leaves it out of JSON)."""
    m = _TABLE_COMMENT.search(terse)
    return m.group(1) if m else ""


def chain_names(doc: dict[str, Any], table: str) -> set[str] | None:
    """The chain names of ``table`` in `nft -j list chains FAMILY` (None: no chain, no table)."""
    names = {
        item["chain"]["name"]
        for item in doc.get("nftables", [])
        if "chain" in item and item["chain"].get("table") == table
    }
    return names or None


def dynamic_elements(doc: dict[str, Any]) -> list[DynamicElement]:
    """The elements of `nft -j list map …`, with their timeouts (the map's, where none is set)."""
    out = []
    for item in doc.get("nftables", []):
        obj = item.get("map")
        if obj:
            default = int(obj.get("timeout", 0))
            protos = _proto_fields(obj.get("type"))
            for raw in obj.get("elem", []):
                key = raw[0]["elem"] if isinstance(raw[0], dict) and "elem" in raw[0] else {"val": raw[0]}
                parts = _proto_names(_parts(key["val"]), protos)
                out.append(DynamicElement(parts, _parts(raw[1]), int(key.get("timeout", default))))
    return out


def counter_packets(doc: dict[str, Any], table: str) -> dict[str, int]:
    """The packets of each named counter of ``table`` in `nft -j list counters table …`."""
    return {
        c["name"]: int(c.get("packets", 0))
        for item in doc.get("nftables", [])
        if (c := item.get("counter")) and c.get("table") == table
    }


def table_from_json(doc: dict[str, Any], family: Family, name: str, comment: str) -> Table:
    """Build an adopted Table (names, comment, elements) from `nft -j list table`."""
    chains: dict[str, Chain] = {}
    sets: dict[str, Set] = {}
    counters: dict[str, Counter] = {}
    elements: dict[str, dict[Key, Element]] = {}
    for item in doc.get("nftables", []):
        if "chain" in item:
            chains[item["chain"]["name"]] = Chain(item["chain"]["name"])
        elif "counter" in item:
            counters[item["counter"]["name"]] = Counter(item["counter"]["name"])
        elif "set" in item or "map" in item:
            is_map = "map" in item
            obj = item["map"] if is_map else item["set"]
            sname = obj["name"]
            sets[sname] = Set(sname, spec="type ? : ?" if is_map else "type ?")
            els: dict[Key, Element] = {}
            protos = _proto_fields(obj.get("type"))
            for raw in obj.get("elem", []):
                e = _element(raw, is_map)
                if protos:
                    e = e._replace(key=_proto_names(e.key, protos))
                els[e.key] = e
            elements[sname] = els
    return Table(family, name, comment, chains, sets, elements, adopted=True, counters=counters)


# nft prints a protocol by its /etc/protocols name, and by number where that file is missing (a
# minimal container image): read back, numbers are named as the compiler names them, or every
# full sync would see every map element as changed.
_PROTO_NAMES = {"6": "tcp", "17": "udp", "132": "sctp", "1": "icmp", "58": "ipv6-icmp"}


def _proto_fields(types: Any) -> tuple[int, ...]:
    """The key's protocol fields, from the set's JSON "type": datatype names (nft 1.0.6, also for
    typeof sets), or ``{"typeof": expression}`` (nft >= 1.1 for typeof sets: ``meta l4proto``)."""
    if isinstance(types, dict) and "typeof" in types:
        expr = types["typeof"]
        parts = expr["concat"] if isinstance(expr, dict) and "concat" in expr else [expr]
        return tuple(i for i, p in enumerate(parts) if p == {"meta": {"key": "l4proto"}})
    types = [types] if isinstance(types, str) else types or []
    return tuple(i for i, t in enumerate(types) if t == "inet_proto")


def _proto_names(key: Key, fields: tuple[int, ...]) -> Key:
    return tuple(_PROTO_NAMES.get(part, part) if i in fields else part for i, part in enumerate(key))


def _element(raw: Any, is_map: bool) -> Element:
    key_raw, val_raw = (raw[0], raw[1]) if is_map else (raw, None)
    comment = None
    if isinstance(key_raw, dict) and "elem" in key_raw:
        comment = key_raw["elem"].get("comment")
        key_raw = key_raw["elem"]["val"]
    value = None if val_raw is None else _parts(val_raw)
    return Element(_parts(key_raw), value, comment)


_VERDICTS = ("accept", "drop", "continue", "return")


def _parts(x: Any) -> tuple[str, ...]:
    if isinstance(x, dict) and "concat" in x:
        return tuple(_atom(p) for p in x["concat"])
    return (_atom(x),)


def _atom(x: Any) -> str:
    if isinstance(x, str | int):
        return str(x)
    if isinstance(x, dict):
        if "prefix" in x:
            return f"{x['prefix']['addr']}/{x['prefix']['len']}"
        if "range" in x:
            return f"{x['range'][0]}-{x['range'][1]}"
        for verdict in ("goto", "jump"):
            if verdict in x:
                return f"{verdict} {x[verdict]['target']}"
        for verdict in _VERDICTS:
            if verdict in x:
                return verdict
    raise ValueError(f"unexpected element part in nft JSON: {x!r}")


class CountedElement(NamedTuple):
    """A set or map element read back with its counter (a set declared with ``counter``)."""

    key: Key
    packets: int
    bytes: int
    comment: str | None = None
    value: tuple[str, ...] | None = None


def counted_elements(doc: dict[str, Any]) -> dict[str, list[CountedElement]]:
    """Set name -> its elements with their counters, from `nft -j list set|map …` (several
    listings' items alike); an element without a counter counts 0."""
    out: dict[str, list[CountedElement]] = {}
    for item in doc.get("nftables", []):
        is_map = "map" in item
        obj = item.get("map") or item.get("set")
        if not obj:
            continue
        protos = _proto_fields(obj.get("type"))
        els = out.setdefault(obj["name"], [])
        for raw in obj.get("elem", []):
            key_raw, val_raw = (raw[0], raw[1]) if is_map else (raw, None)
            elem = key_raw["elem"] if isinstance(key_raw, dict) and "elem" in key_raw else {"val": key_raw}
            counter = elem.get("counter") or {}
            key = _proto_names(_parts(elem["val"]), protos) if protos else _parts(elem["val"])
            value = None if val_raw is None else _parts(val_raw)
            packets, size = int(counter.get("packets", 0)), int(counter.get("bytes", 0))
            els.append(CountedElement(key, packets, size, elem.get("comment"), value))
    return out
