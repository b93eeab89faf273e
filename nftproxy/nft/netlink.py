"""Set and map elements as a raw nfnetlink batch: the fast path for bulk loads.

nft's parser costs 10-13 µs per map element on nft 1.0.6 (100k endpoint-map elements: ~1.1 s);
the same elements packed here and sent as NEWSETELEM messages take ~0.5 s, kernel included. Only
plain (non-interval) sets and maps whose key and data are made of fixed-size types are encoded;
anything else stays on the nft text path.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import struct
from collections.abc import Callable, Iterable, Sequence

from nftproxy.nft import nlmsg
from nftproxy.nft.nlmsg import NLA, NLA_F_NESTED, NLM_F_ACK, NLM_F_CREATE, NLM_F_REQUEST, nested, nla
from nftproxy.nft.objects import Element, Set

NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWSETELEM, NFT_MSG_DELSETELEM = 12, 14
NFT_MSG_NEWGEN, NFT_MSG_GETGEN = 15, 16
NFTA_GEN_ID = 1
# Attribute types (linux/netfilter/nf_tables.h)
NFTA_SET_ELEM_LIST_TABLE, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_ELEMENTS = 1, 2, 3
NFTA_LIST_ELEM = 1
NFTA_SET_ELEM_KEY, NFTA_SET_ELEM_DATA, NFTA_SET_ELEM_USERDATA = 1, 2, 6
NFTA_DATA_VALUE, NFTA_DATA_VERDICT = 1, 2
NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN = 1, 2
NFTNL_UDATA_SET_ELEM_COMMENT = 0  # libnftnl's userdata TLV type of an element comment
NF_DROP, NF_ACCEPT, NFT_CONTINUE, NFT_JUMP, NFT_GOTO, NFT_RETURN = 0, 1, -1, -3, -4, -5
# Bytes of elements per message: their nested list attribute has a 16-bit length (64 KiB).
MESSAGE_BYTES = 60_000

# Element components by their nft type: text -> bytes, each padded to 4 bytes (nft registers).
Packer = Callable[[str], bytes]
_PROTOS = {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "icmpv6": 58}


_ipv4: Packer = functools.partial(socket.inet_pton, socket.AF_INET)
_ipv6: Packer = functools.partial(socket.inet_pton, socket.AF_INET6)


def _proto(text: str) -> bytes:
    return bytes((_PROTOS[text] if text in _PROTOS else int(text), 0, 0, 0))


def _service(text: str) -> bytes:
    return struct.pack(">H", int(text)) + b"\0\0"


def _integer(text: str) -> bytes:
    return struct.pack("=I", int(text))  # numgen: a 32-bit register in host order


TYPES: dict[str, Packer] = {
    "ipv4_addr": _ipv4,
    "ipv6_addr": _ipv6,
    "inet_proto": _proto,
    "inet_service": _service,
    "ip daddr": _ipv4,
    "ip saddr": _ipv4,
    "ip6 daddr": _ipv6,
    "ip6 saddr": _ipv6,
    "meta l4proto": _proto,
    "th dport": _service,
}


def _component(expr: str) -> Packer | None:
    expr = expr.strip()
    if expr.startswith("numgen "):
        return _integer
    return TYPES.get(expr)


_header = NLA.pack  # an attribute's header: length, type


class _Cache(dict[str, bytes]):
    def __init__(self, packer: Packer) -> None:
        super().__init__()
        self.packer = packer

    def __missing__(self, text: str) -> bytes:
        b = self[text] = self.packer(text)
        return b


def _cached(packer: Packer) -> Packer:
    """Protocols, ports, slots and Service IPs repeat a lot: pack each text once."""
    if packer in (_ipv4, _ipv6):
        return packer  # inet_pton is as fast as a cache lookup
    return _Cache(packer).__getitem__


class Layout:
    """How one set's elements are packed; ``None`` from ``for_set`` when it cannot be."""

    def __init__(self, key: Sequence[Packer], data: Sequence[Packer] | None, verdict: bool) -> None:
        self.key = [_cached(p) for p in key]
        self.data = None if data is None else [_cached(p) for p in data]
        self.verdict = verdict
        self._verdicts: dict[str, bytes] = {}
        self._key_headers: dict[int, bytes] = {}  # by length: the nested KEY/DATA attribute headers
        self._data_headers: dict[int, bytes] = {}
        self._slots: list[bytes] = []
        self._spread_fixed: tuple[bytes, bytes] | None = None

    def pack(self, e: Element) -> bytes:
        """The element as a nested NFTA_LIST_ELEM (hot path: ~10^5 calls per bulk load)."""
        key = b"".join([p(v) for p, v in zip(self.key, e.key, strict=True)])
        hdr = self._key_headers.get(len(key))
        if hdr is None:
            hdr = self._key_headers[len(key)] = _header(len(key) + 8, NFTA_SET_ELEM_KEY | NLA_F_NESTED) + _header(
                len(key) + 4, NFTA_DATA_VALUE
            )
        attrs = hdr + key
        if e.value is not None:
            if self.verdict:
                v = self._verdicts.get(e.value[0])
                if v is None:
                    v = self._verdicts[e.value[0]] = nested(NFTA_SET_ELEM_DATA, _verdict(e.value[0]))
                attrs += v
            elif self.data is not None:
                data = b"".join([p(x) for p, x in zip(self.data, e.value, strict=True)])
                dh = self._data_headers.get(len(data))
                if dh is None:
                    dh = self._data_headers[len(data)] = _header(
                        len(data) + 8, NFTA_SET_ELEM_DATA | NLA_F_NESTED
                    ) + _header(len(data) + 4, NFTA_DATA_VALUE)
                attrs += dh + data
        if e.comment:
            text = e.comment.encode()[:127] + b"\0"
            attrs += nla(NFTA_SET_ELEM_USERDATA, struct.pack("=BB", NFTNL_UDATA_SET_ELEM_COMMENT, len(text)) + text)
        return _header(len(attrs) + 4, NFTA_LIST_ELEM | NLA_F_NESTED) + attrs

    def pack_all(self, elements: Iterable[Element]) -> list[bytes]:
        """``pack`` of many. Elements of a key-only set without a comment (the ~10^5
        `hairpin-endpoints` entries of a 10k-Service load) take a short way: their whole header
        depends only on the key's length, so it is made once (docs/performance.md, bench.apply)."""
        if self.data is not None or self.verdict:
            return [self.pack(e) for e in elements]
        packers = self.key
        two = len(packers) == 2
        k0, k1 = packers if two else (packers[0], packers[0])
        heads: dict[int, bytes] = {}
        join = b"".join
        out: list[bytes] = []
        append = out.append
        for e in elements:
            if e.comment or e.value is not None:
                append(self.pack(e))
                continue
            parts = e.key
            if two and len(parts) == 2:
                key = k0(parts[0]) + k1(parts[1])
            else:
                key = join([p(v) for p, v in zip(packers, parts, strict=True)])
            head = heads.get(len(key))
            if head is None:
                n = len(key)
                head = heads[n] = (
                    _header(n + 12, NFTA_LIST_ELEM | NLA_F_NESTED)
                    + _header(n + 8, NFTA_SET_ELEM_KEY | NLA_F_NESTED)
                    + _header(n + 4, NFTA_DATA_VALUE)
                )
            append(head + key)
        return out

    def pack_spread(self, key: Sequence[str], values: Sequence[Sequence[str]]) -> list[bytes]:
        """Elements ``key . i : values[i]`` (i = 0, 1, …; the key's last part is the slot number),
        without building them: the key prefix is packed once, the headers (fixed sizes) once per
        map. The hot path of a bulk load (~10^5 elements at 10k Services)."""
        if self.data is None or self.verdict or len(key) + 1 != len(self.key) or not values:
            if not values:
                return []
            raise ValueError("pack_spread needs a data map keyed by the frontend and a slot")
        prefix = b"".join([p(v) for p, v in zip(self.key, key, strict=False)])
        slots = self._slot_bytes(len(values))
        packers = self.data
        fixed = self._spread_fixed
        if fixed is None:  # every part has a fixed size (Layout.for_set): the headers never change
            first = b"".join([p(x) for p, x in zip(packers, values[0], strict=True)])
            fixed = self._spread_fixed = Layout._spread_headers(len(prefix) + len(slots[0]), len(first))
        head, mid = fixed
        head += prefix
        join = b"".join
        if len(packers) == 2:
            d0, d1 = packers
            return [join((head, slots[i], mid, d0(a), d1(b))) for i, (a, b) in enumerate(values)]
        return [
            join((head, slots[i], mid, *[p(x) for p, x in zip(packers, v, strict=True)])) for i, v in enumerate(values)
        ]

    def _slot_bytes(self, n: int) -> list[bytes]:
        have = self._slots
        while len(have) < n:
            have.append(self.key[-1](str(len(have))))
        return have

    @staticmethod
    def _spread_headers(klen: int, dlen: int) -> tuple[bytes, bytes]:
        """The element's, its key's and its data's attribute headers (sizes: key, data)."""
        head = (
            _header(klen + dlen + 20, NFTA_LIST_ELEM | NLA_F_NESTED)
            + _header(klen + 8, NFTA_SET_ELEM_KEY | NLA_F_NESTED)
            + _header(klen + 4, NFTA_DATA_VALUE)
        )
        return head, _header(dlen + 8, NFTA_SET_ELEM_DATA | NLA_F_NESTED) + _header(dlen + 4, NFTA_DATA_VALUE)

    @classmethod
    def for_set(cls, s: Set) -> Layout | None:
        if s.flags or s.dynamic or s.timeout:
            return None
        spec = s.spec.split(" ", 1)[1] if s.spec.startswith(("type ", "typeof ")) else ""
        key_text, _, data_text = spec.partition(":")
        key = [_component(p) for p in key_text.split(" . ")]
        if not key_text or any(k is None for k in key):
            return None
        if not data_text:
            return cls([k for k in key if k], None, False)
        if data_text.strip() == "verdict":
            return cls([k for k in key if k], None, True)
        data = [_component(p) for p in data_text.split(" . ")]
        if any(d is None for d in data):
            return None
        return cls([k for k in key if k], [d for d in data if d], False)


_VERDICTS = {"accept": NF_ACCEPT, "drop": NF_DROP, "continue": NFT_CONTINUE, "return": NFT_RETURN}


def _verdict(text: str) -> bytes:
    word, _, chain = text.partition(" ")
    if word in ("goto", "jump"):
        code = struct.pack(">i", NFT_GOTO if word == "goto" else NFT_JUMP)
        target = nla(NFTA_VERDICT_CHAIN, chain.encode() + b"\0")
        return nested(NFTA_DATA_VERDICT, nla(NFTA_VERDICT_CODE, code) + target)
    return nested(NFTA_DATA_VERDICT, nla(NFTA_VERDICT_CODE, struct.pack(">i", _VERDICTS[word])))


FAMILIES = {"ip": socket.AF_INET, "ip6": socket.AF_INET6}


class Batch:
    """Element additions and deletions (any tables), sent as ONE kernel transaction."""

    def __init__(self) -> None:
        # (family, table, kind, set name, packed elements)
        self.messages: list[tuple[int, bytes, int, bytes, bytes]] = []
        self.count = 0

    def add(self, family: str, table: str, set_name: str, packed: Iterable[bytes], delete: bool = False) -> None:
        kind = NFT_MSG_DELSETELEM if delete else NFT_MSG_NEWSETELEM
        header = (FAMILIES[family], table.encode() + b"\0", kind, set_name.encode() + b"\0")
        items = packed if isinstance(packed, list) else list(packed)
        self.count += len(items)
        sizes = set(map(len, items))
        if len(sizes) == 1:  # endpoint maps: fixed-size elements, cut by count
            per = max(1, MESSAGE_BYTES // sizes.pop())
            for i in range(0, len(items), per):
                self.messages.append((*header, b"".join(items[i : i + per])))
            return
        chunk: list[bytes] = []
        size = 0
        for item in items:
            if size + len(item) > MESSAGE_BYTES and chunk:
                self.messages.append((*header, b"".join(chunk)))
                chunk, size = [], 0
            chunk.append(item)
            size += len(item)
        if chunk:
            self.messages.append((*header, b"".join(chunk)))

    def encode(self) -> tuple[bytes, int]:
        """The batch (begin, messages, end) and how many acks to expect."""
        return nlmsg.batch(
            NFNL_SUBSYS_NFTABLES,
            (
                (
                    (NFNL_SUBSYS_NFTABLES << 8) | kind,
                    NLM_F_REQUEST | NLM_F_ACK | (NLM_F_CREATE if kind == NFT_MSG_NEWSETELEM else 0),
                    family,
                    nla(NFTA_SET_ELEM_LIST_TABLE, table)
                    + nla(NFTA_SET_ELEM_LIST_SET, name)
                    + nested(NFTA_SET_ELEM_LIST_ELEMENTS, elements),
                )
                for family, table, kind, name, elements in self.messages
            ),
        )


def open_socket() -> socket.socket:
    """A netfilter netlink socket for batches, in the calling thread's network namespace. Keep it
    for the next batch: closing one after a transaction that deleted elements waits for the
    kernel's deferred destroy work (``nft_rcv_nl_event`` flushes it), an RCU grace period:
    ~8-16 ms on this machine's kernel (6.18), and every partial sync deletes elements."""
    return nlmsg.open_socket(nlmsg.NETLINK_NETFILTER)


def send(batch: Batch, sock: socket.socket | None = None) -> None:
    """Commit ``batch`` on ``sock`` (open_socket; None: a socket of its own, from the calling
    thread's network namespace, closed after); raise OSError on refusal. After an OSError,
    ``sock`` may hold the rest of the kernel's answers: close it."""
    if sock is None:
        with open_socket() as s:
            send(batch, s)
        return
    data, count = batch.encode()
    sock.setsockopt(socket.SOL_SOCKET, nlmsg.SO_SNDBUFFORCE, max(len(data) * 2, 1 << 20))
    sock.send(data)
    seen = 0
    while seen < count:
        for _seq, err in nlmsg.acks(sock.recv(1 << 20)):
            if err:  # the kernel aborted the whole batch
                raise OSError(-err, f"netlink batch refused: {os.strerror(-err)}")
            seen += 1


def generation(sock: socket.socket) -> int:
    """The ruleset's generation (NFT_MSG_GETGEN): the cheapest question nf_tables answers. Raises
    OSError with the kernel's errno when it does not (EPERM without CAP_NET_ADMIN, EOPNOTSUPP
    without nf_tables)."""
    sock.send(nlmsg.nfnl_message((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN, NLM_F_REQUEST, 1, socket.AF_UNSPEC))
    data = sock.recv(1 << 16)
    for kind, _seq, off, length in nlmsg.messages(data):
        if kind == nlmsg.NLMSG_ERROR and (err := nlmsg.error_code(data, off)):
            raise OSError(-err, os.strerror(-err))
        if kind == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN:
            gen = nlmsg.attrs(data, off + nlmsg.NLMSG.size + nlmsg.NFGEN.size, off + length).get(NFTA_GEN_ID)
            if gen is not None and len(gen) == 4:
                return int(struct.unpack(">I", gen)[0])
    raise OSError(errno.EPROTO, "no ruleset generation in the kernel's answer")
