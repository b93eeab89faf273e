"""UDP conntrack entries through the `conntrack` tool (conntrack-tools), in the calling
thread's network namespace: listing the DNATed ones, deleting some."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable

from nftproxy.nft.objects import Family, UdpFlow

_FAMILY = {Family.IP: "ipv4", Family.IP6: "ipv6"}


def udp_flows(family: Family) -> list[UdpFlow]:
    argv = ["conntrack", "-L", "-p", "udp", "-f", _FAMILY[family]]
    return parse(subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout)


def delete_udp_flows(family: Family, flows: Iterable[UdpFlow]) -> None:
    for f in flows:
        argv = ["conntrack", "-D", "-f", _FAMILY[family], "-p", "udp"]
        argv += ["--orig-dst", f.orig_dst, "--orig-port-dst", f.orig_dport, "--reply-src", f.reply_src]
        # exit 1 just means "no entry matched" (the flow ended meanwhile)
        subprocess.run(argv, capture_output=True, check=False, timeout=10)


def parse(text: str) -> list[UdpFlow]:
    """DNATed flows of `conntrack -L` lines: the first src/dst/dport are the original direction,
    the second src is who answers (the endpoint, when DNATed)."""
    out = []
    for line in text.splitlines():
        fields: dict[str, list[str]] = {}
        for word in line.split():
            name, eq, value = word.partition("=")
            if eq:
                fields.setdefault(name, []).append(value)
        dst, dport, src = fields.get("dst", []), fields.get("dport", []), fields.get("src", [])
        if len(dst) >= 2 and len(src) >= 2 and dport and src[1] != dst[0]:
            out.append(UdpFlow(dst[0], dport[0], src[1]))
    return out
