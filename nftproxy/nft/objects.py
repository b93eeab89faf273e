"""Typed descriptions of one nftables table: chains, sets/maps and their elements."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import NamedTuple


class Family(StrEnum):
    """Address family of a table; nftproxy keeps one table per family, like upstream."""

    IP = "ip"
    IP6 = "ip6"

    @property
    def addr_type(self) -> str:
        return "ipv4_addr" if self is Family.IP else "ipv6_addr"

    @property
    def version(self) -> int:
        return 4 if self is Family.IP else 6


@dataclass(frozen=True)
class Hook:
    """Where a base chain is attached, and why at that priority."""

    type: str  # "filter" or "nat"
    hook: str  # "prerouting", "input", "forward", "output", "postrouting"
    priority: int
    why: str  # one line: why this priority (rendered as the chain's comment)


@dataclass(frozen=True)
class Chain:
    name: str
    rules: tuple[str, ...] = ()
    hook: Hook | None = None

    def declaration(self) -> str:
        if self.hook is None:
            return ""
        h = self.hook
        return f"type {h.type} hook {h.hook} priority {h.priority}; policy accept; comment {quote(h.why)};"


@dataclass(frozen=True)
class Set:
    """A named set, or a map when `spec` has a ':' (e.g. ``type a . b : verdict``)."""

    name: str
    spec: str  # "type …" or "typeof …", with " : …" for maps
    flags: tuple[str, ...] = ()
    timeout: str | None = None
    comment: str | None = None
    dynamic: bool = False  # elements are written by the packet path (affinity): never diffed
    # each element carries a counter (``counter;``). Out of repr: the table comment's digest of
    # the declarations (compiler/skeleton.py) stays what tables without counters already hold.
    counter: bool = field(default=False, repr=False)

    @property
    def is_map(self) -> bool:
        return ":" in self.spec

    @property
    def keyword(self) -> str:
        return "map" if self.is_map else "set"

    @property
    def key_width(self) -> int:
        """The parts of an element's key (``type a . b . c``: 3)."""
        return self.spec.partition(":")[0].count(" . ") + 1

    @property
    def value_width(self) -> int:
        """The parts of a map element's value (a verdict is one); 0 for a set."""
        return self.spec.partition(":")[2].count(" . ") + 1 if self.is_map else 0

    def declaration(self) -> str:
        parts = [f"{self.spec};"]
        if self.flags:
            parts.append(f"flags {','.join(self.flags)};")
        if self.timeout:
            parts.append(f"timeout {self.timeout};")
        if self.counter:
            parts.append("counter;")
        if self.comment:
            parts.append(f"comment {quote(self.comment)};")
        return " ".join(parts)


@dataclass(frozen=True)
class Counter:
    """A named counter: a rule's ``counter name "NAME"`` counts its packets and bytes into it,
    and ``nft list counters`` (or a scrape) reads them by a stable name."""

    name: str
    comment: str | None = None

    def declaration(self) -> str:
        return f"comment {quote(self.comment)};" if self.comment else ""


Key = tuple[str, ...]
Slot = tuple[str, str]  # the value of an endpoint map's element: endpoint address, port
# An endpoint map's entries for one frontend, kept as one: the N elements ``key . i : slots[i]``
# (an endpoint map holds ~80% of a table's elements).
Spread = tuple[Key, tuple[Slot, ...]]


class Element(NamedTuple):
    """One set or map element, in nft's canonical text form (``key`` parts joined by " . ").

    A NamedTuple, not a dataclass: hundreds of thousands are built per full compile.
    """

    key: Key
    value: tuple[str, ...] | None = None  # map data; a verdict is one part, e.g. "goto x"
    comment: str | None = None

    def render(self) -> str:
        text = " . ".join(self.key)
        if self.comment:
            text += f" comment {quote(self.comment)}"
        if self.value is not None:
            text += " : " + " . ".join(self.value)
        return text


@dataclass(frozen=True)
class Table:
    """A whole table as desired, or as read back from the kernel (``adopted``).

    Read back, only names, the table comment and elements are known: rules and set declarations
    are not parsed. The table comment names the layout version, so same version + same name means
    same set declaration; chains (a small fixed skeleton, the data lives in maps) are rewritten.
    """

    family: Family
    name: str
    comment: str
    chains: Mapping[str, Chain] = field(default_factory=dict)
    sets: Mapping[str, Set] = field(default_factory=dict)
    elements: Mapping[str, Mapping[Key, Element]] = field(default_factory=dict)
    adopted: bool = False
    counters: Mapping[str, Counter] = field(default_factory=dict)  # named counters (read back: names)

    def count_elements(self) -> int:
        return sum(len(e) for e in self.elements.values())


def address(addr: IPv4Address | IPv6Address) -> str:
    """An address as nft writes it, so that a table read back compares equal: nft formats IPv6
    with glibc's inet_ntop, which writes IPv4-mapped and -compatible addresses in dotted form
    (``::ffff:198.18.0.100``, where Python writes ``::ffff:c612:64``)."""
    if addr.version == 4:
        return str(addr)
    return socket.inet_ntop(socket.AF_INET6, addr.packed)


def prefix(net: IPv4Network | IPv6Network) -> str:
    """A network as an element of an interval set: a host prefix (/32, /128) as its address
    alone, which is how nft lists it, any other as ``address/length`` (including /0)."""
    text = address(net.network_address)
    return text if net.prefixlen == net.max_prefixlen else f"{text}/{net.prefixlen}"


def quote(text: str) -> str:
    """Quote a comment for nft (no escapes exist: quotes are replaced)."""
    return '"' + text.replace('"', "'") + '"'


class DynamicElement(NamedTuple):
    """An element the packet path wrote (e.g. `update @map { … }`), with its timeout in seconds."""

    key: Key
    value: tuple[str, ...]
    timeout: int


class UdpFlow(NamedTuple):
    """A DNATed UDP conntrack entry: where the client sent it, and who answers."""

    orig_dst: str
    orig_dport: str
    reply_src: str
    reply_sport: str = ""  # the endpoint's port ("": not known, judged by the address alone)
