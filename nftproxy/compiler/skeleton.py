"""The fixed part of the table, declared as data: base chains, their priorities, the maps.

Rules use ``{ip}`` for the family's keyword (ip / ip6) and ``{addr}`` for its address type.
Nothing here grows with the number of Services: Services live in map elements, and the only
per-size objects are one map and a few chains per distinct endpoint *count* (see build.py).
"""

from __future__ import annotations

import hashlib

from nftproxy.nft.objects import Chain, Family, Hook, Set

LAYOUT = 1
MASQ_MARK = "0x4000"

BASE_CHAINS: tuple[tuple[str, Hook, tuple[str, ...]], ...] = (
    (
        "filter-input",
        Hook("filter", "input", -110, "-110: ahead of host firewalls (0); rejects NodePorts with no endpoints"),
        ("ct state new jump nodeport-endpoints-check", "ct state new jump service-endpoints-check"),
    ),
    (
        "filter-forward",
        Hook("filter", "forward", -110, "-110: ahead of host firewalls (0); rejects Service IPs with no endpoints"),
        ("ct state new jump service-endpoints-check", "ct state new jump cluster-ips-check"),
    ),
    (
        "filter-output",
        Hook("filter", "output", -110, "-110: before nat-output's DNAT (-100), daddr is still the Service IP"),
        ("ct state new jump service-endpoints-check", "ct state new jump nodeport-endpoints-check"),
    ),
    (
        "nat-prerouting",
        Hook("nat", "prerouting", -100, "-100 (dstnat): DNAT Service traffic entering the node, before routing"),
        ("jump services",),
    ),
    (
        "nat-output",
        Hook("nat", "output", -100, "-100 (dstnat): DNAT Service traffic from the node's own processes"),
        ("jump services",),
    ),
    (
        "nat-postrouting",
        Hook("nat", "postrouting", 100, "100 (srcnat): masquerade once routing chose the way out"),
        ("jump masquerading",),
    ),
)

REGULAR_CHAINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "services",
        (
            "{ip} daddr . meta l4proto . th dport vmap @service-ips",
            "fib daddr type local {ip} daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
        ),
    ),
    ("service-endpoints-check", ("{ip} daddr . meta l4proto . th dport vmap @no-endpoint-services",)),
    (
        "nodeport-endpoints-check",
        ("fib daddr type local {ip} daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports",),
    ),
    ("cluster-ips-check", ("{ip} daddr @cluster-ips reject",)),
    ("reject-chain", ("reject",)),
    ("mark-for-masquerade", (f"meta mark set meta mark | {MASQ_MARK}",)),
    (
        "masquerading",
        (
            "ct status dnat {ip} saddr . {ip} daddr @hairpin-endpoints jump mark-for-masquerade",
            f"meta mark & {MASQ_MARK} == 0 return",
            f"meta mark set meta mark ^ {MASQ_MARK}",
            "masquerade fully-random",
        ),
    ),
)

SETS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "service-ips",
        "type {addr} . inet_proto . inet_service : verdict",
        (),
        "ClusterIPs, externalIPs, LoadBalancer IPs",
    ),
    ("service-nodeports", "type inet_proto . inet_service : verdict", (), "NodePorts"),
    ("no-endpoint-services", "type {addr} . inet_proto . inet_service : verdict", (), "Service IPs without endpoints"),
    ("no-endpoint-nodeports", "type inet_proto . inet_service : verdict", (), "NodePorts without endpoints"),
    ("cluster-ips", "type {addr}", (), "every ClusterIP: other ports are rejected"),
    ("nodeport-ips", "type {addr}", ("interval",), "addresses NodePorts answer on"),
    ("cluster-cidrs", "type {addr}", ("interval",), "pod CIDRs: sources not masqueraded"),
    ("hairpin-endpoints", "type {addr} . {addr}", (), "endpoint . itself: hairpin traffic is masqueraded"),
)


def fill(text: str, family: Family) -> str:
    return text.format(ip=family.value, addr=family.addr_type)


def base_sets(family: Family) -> list[Set]:
    return [Set(name, fill(spec, family), flags, comment=comment) for name, spec, flags, comment in SETS]


def base_chains(family: Family) -> list[Chain]:
    chains = [Chain(name, tuple(fill(r, family) for r in rules), hook) for name, hook, rules in BASE_CHAINS]
    chains += [Chain(name, tuple(fill(r, family) for r in rules)) for name, rules in REGULAR_CHAINS]
    return chains


# -- per endpoint count N: one map and a few chains, shared by every Service with N endpoints ----


def endpoints_map(family: Family, n: int) -> Set:
    ip = family.value
    return Set(
        f"endpoints-{n}",
        f"typeof {ip} daddr . meta l4proto . th dport . numgen random mod {n} : {ip} daddr . th dport",
        comment=f"Service IP . proto . port . slot -> one of {n} endpoints",
    )


def nodeport_endpoints_map(family: Family, n: int) -> Set:
    ip = family.value
    return Set(
        f"nodeport-endpoints-{n}",
        f"typeof meta l4proto . th dport . numgen random mod {n} : {ip} daddr . th dport",
        comment=f"proto . NodePort . slot -> one of {n} endpoints",
    )


def load_balance_chain(family: Family, n: int) -> Chain:
    ip = family.value
    return Chain(
        f"load-balance-{n}",
        (
            f"meta l4proto {{ tcp, udp, sctp }} dnat {ip} to "
            f"{ip} daddr . meta l4proto . th dport . numgen random mod {n} map @endpoints-{n}",
        ),
    )


def cluster_chain(n: int, masquerade: str | None) -> Chain:
    """ClusterIP traffic; ``masquerade`` is the rule selecting what to masquerade (or None)."""
    rules = (masquerade,) if masquerade else ()
    return Chain(f"cluster-{n}", (*rules, f"goto load-balance-{n}"))


def external_chain(n: int) -> Chain:
    """externalIPs and LoadBalancer IPs with externalTrafficPolicy Cluster: always masqueraded."""
    return Chain(f"external-{n}", ("jump mark-for-masquerade", f"goto load-balance-{n}"))


def nodeport_chain(family: Family, n: int) -> Chain:
    ip = family.value
    return Chain(
        f"nodeport-{n}",
        (
            "jump mark-for-masquerade",
            f"meta l4proto {{ tcp, udp, sctp }} dnat {ip} to "
            f"meta l4proto . th dport . numgen random mod {n} map @nodeport-endpoints-{n}",
        ),
    )


def layout_comment(family: Family, masquerade: str | None) -> str:
    """The table comment: layout version and a digest of every rule template this config yields.

    Same comment means same rules for every chain name, so a restarted proxy can adopt the table.
    """
    chains = [
        *base_chains(family),
        load_balance_chain(family, 1),
        cluster_chain(1, masquerade),
        external_chain(1),
        nodeport_chain(family, 1),
    ]
    sets = [*base_sets(family), endpoints_map(family, 1), nodeport_endpoints_map(family, 1)]
    text = repr((chains, sets))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"nftproxy layout {LAYOUT} rules {digest}: managed by nftproxy, do not edit"
