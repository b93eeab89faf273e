"""Addresses and CIDRs read as kube-proxy reads them: ``k8s.io/utils/net`` ParseIPSloppy and
ParseCIDRSloppy (a fork of Go 1.16's net.ParseIP / net.ParseCIDR), then the family Kubernetes gives
the result (``IPFamilyOf``: an IPv4-mapped IPv6 address is IPv4).

Before Kubernetes 1.36 (StrictIPCIDRValidation off) the apiserver validated Services' externalIPs,
clusterIPs, loadBalancerSourceRanges, load balancer ingress IPs and IPv4 EndpointSlice addresses
with these parsers alone, and it keeps stored values valid after that, so these spellings exist:

- IPv4 octets with leading zeros, read as DECIMAL: ``010.001.002.003`` is 10.1.2.3 (libc's
  inet_aton would read octal 8.1.2.3: Kubernetes never does);
- IPv6 groups of more than four hex digits while the value fits 16 bits (``00fd00::1``);
- IPv4-mapped IPv6 (``::ffff:1.2.3.4``, ``::ffff:102:304``): IPv4 1.2.3.4 to Kubernetes;
- CIDRs with bits set after the prefix (``10.0.0.1/8`` is 10.0.0.0/8) and a prefix length with
  leading zeros (``/08``); an IPv4-mapped CIDR of /96 or longer is the IPv4 CIDR 96 bits shorter
  (``::ffff:10.0.0.0/104`` is 10.0.0.0/8).

Nothing else: no surrounding spaces (callers trim where kube-proxy does), no zone (``%eth0``), no
netmask form (``/255.0.0.0``), no address without ``/`` where a CIDR is read. Results are
canonical ``ipaddress`` objects; None means kube-proxy's parser refuses the text too.
"""

from __future__ import annotations

from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from socket import AF_INET, AF_INET6, inet_pton

from nftproxy.model.types import IPAddress, IPNetwork

_BIG = 0xFFFFFF  # Go's dtoi/xtoi give up at this value (any number of leading zeros is fine)
_V4_IN_V6 = b"\x00" * 10 + b"\xff\xff"
# Go's strings.TrimSpace (unicode.IsSpace): not str.strip(), which also strips \x1c-\x1f
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"


def go_trim_space(text: str) -> str:
    return text.strip(GO_SPACE)


def _dtoi(s: str, i: int) -> tuple[int, int] | None:
    """Decimal digits from s[i]: (value, end), None without a digit or past _BIG."""
    n, j = 0, i
    while j < len(s) and "0" <= s[j] <= "9":
        n = n * 10 + ord(s[j]) - 48
        if n >= _BIG:
            return None
        j += 1
    return None if j == i else (n, j)


def _xtoi(s: str, i: int) -> tuple[int, int] | None:
    """Hex digits from s[i]: (value, end), None without a digit or past _BIG."""
    n, j = 0, i
    while j < len(s):
        c = s[j]
        if "0" <= c <= "9":
            d = ord(c) - 48
        elif "a" <= c <= "f":
            d = ord(c) - 87
        elif "A" <= c <= "F":
            d = ord(c) - 55
        else:
            break
        n = n * 16 + d
        if n >= _BIG:
            return None
        j += 1
    return None if j == i else (n, j)


def _v4(s: str) -> bytes | None:
    """parseIPv4: exactly d.d.d.d, each decimal 0-255, leading zeros allowed."""
    out = bytearray(4)
    i = 0
    for k in range(4):
        if i >= len(s):
            return None
        if k > 0:
            if s[i] != ".":
                return None
            i += 1
        r = _dtoi(s, i)
        if r is None or r[0] > 0xFF:
            return None
        out[k], i = r
    return bytes(out) if i == len(s) else None


def _v6(s: str) -> bytes | None:
    """parseIPv6, as Go 1.16 (groups of any length up to 0xFFFF, a trailing dotted IPv4)."""
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis = 0
        s = s[2:]
        if not s:
            return bytes(ip)
    i = 0
    while i < 16:
        r = _xtoi(s, 0)
        if r is None or r[0] > 0xFFFF:
            return None
        n, c = r
        if c < len(s) and s[c] == ".":  # the trailing IPv4 part
            if (ellipsis < 0 and i != 12) or i + 4 > 16:
                return None
            four = _v4(s)
            if four is None:
                return None
            ip[i : i + 4] = four
            s = ""
            i += 4
            break
        ip[i], ip[i + 1] = n >> 8, n & 0xFF
        i += 2
        s = s[c:]
        if not s:
            break
        if s[0] != ":" or len(s) == 1:
            return None
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis = i
            s = s[1:]
            if not s:
                break
    if s:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        n = 16 - i
        ip[ellipsis + n : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + n] = bytes(n)
    elif ellipsis >= 0:
        return None  # an ellipsis stands for at least one group
    return bytes(ip)


def _address(packed: bytes) -> IPAddress:
    """16 bytes as Kubernetes sees them: IPv4 when IPv4-mapped (Go's To4)."""
    if packed[:12] == _V4_IN_V6:
        return IPv4Address(packed[12:])
    return IPv6Address(packed)


@lru_cache(maxsize=4096)
def parse_ip_sloppy(text: str) -> IPAddress | None:
    """ParseIPSloppy(text), IPv4-mapped IPv6 as IPv4; None where it returns nil."""
    try:  # the common spellings, at C speed: glibc's inet_pton takes a subset of ParseIPSloppy's
        return IPv4Address(inet_pton(AF_INET, text))
    except (OSError, ValueError):  # ValueError: an embedded NUL
        pass
    try:
        return _address(inet_pton(AF_INET6, text))
    except (OSError, ValueError):
        pass
    return go_parse_ip(text)


def go_parse_ip(text: str) -> IPAddress | None:
    """The Go code's own path (no inet_pton shortcut): what the shortcuts are checked against."""
    for c in text:  # Go: the first '.' or ':' decides
        if c == ".":
            four = _v4(text)
            return None if four is None else IPv4Address(four)
        if c == ":":
            six = _v6(text)
            return None if six is None else _address(six)
    return None


@lru_cache(maxsize=1024)
def parse_cidr_sloppy(text: str) -> IPNetwork | None:
    """ParseCIDRSloppy(text)'s network (bits after the prefix cleared), in the family and length
    Kubernetes then uses (IPFamilyOfCIDR, IPNet.String); None where it fails."""
    addr, slash, mask = text.partition("/")
    if not slash:
        return None
    packed = _v4(addr)
    bits = 32
    if packed is None:
        packed, bits = _v6(addr), 128
        if packed is None:
            return None
    r = _dtoi(mask, 0)
    if r is None or r[1] != len(mask) or r[0] > bits:
        return None
    length = r[0]
    value = int.from_bytes(packed, "big") & (((1 << length) - 1) << (bits - length))
    if bits == 32:
        return IPv4Network((value, length))
    masked = value.to_bytes(16, "big")
    if masked[:12] == _V4_IN_V6:  # only when length >= 96: the mapped prefix is intact
        return IPv4Network((int.from_bytes(masked[12:], "big"), length - 96))
    return IPv6Network((value, length))
