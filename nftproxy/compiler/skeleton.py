"""The fixed part of the table, declared as data: base chains, their priorities, the maps.

Rules use ``{ip}`` for the family's keyword (ip / ip6) and ``{addr}`` for its address type.
Nothing here grows with the number of Services: Services live in map elements, and the only
per-size objects are one map and a few chains per distinct endpoint *count* (see build.py).
"""

from __future__ import annotations

import hashlib

from nftproxy.compiler import balancing, names
from nftproxy.nft.objects import Chain, Counter, Family, Hook, Set

LAYOUT = 5  # 5: nodeport-ips a plain set when it holds host addresses (see base_sets); 4: every set
# declared with typeof (read by nft 1.0.6 and 1.1.x alike); 3: hairpin keyed by port, service-cidrs,
# filter-output-post-dnat; 2: ClientIP affinity per Service port
MASQUERADE_BIT = 14  # kube-proxy's default --iptables-masquerade-bit / nftables.masqueradeBit


def masquerade_mark(bit: int = MASQUERADE_BIT) -> str:
    """The packet mark that asks for masquerading (``--masquerade-bit``): 14 -> ``0x4000``."""
    return f"{1 << bit:#x}"


# As kube-proxy v1.37's nftables proxier (pkg/proxy/nftables/proxier.go, nftablesJumpChains):
# * loadBalancerSourceRanges judge new connections only (``ct state new jump firewall-check``): a
#   connection or UDP flow open when the ranges are tightened or added goes on; new ones from a
#   source no longer listed are dropped.
# * A NodePort without endpoints is rejected in filter-input only, also for the node's own
#   connections: the packet goes out through lo and is refused on the way in, so the sender
#   sees ICMP port unreachable (a connected UDP socket: ECONNREFUSED; TCP: connection refused).
#   Rejected in filter-output, a UDP send() would fail with EPERM instead (see LOCALHOST_CHECK).
BASE_CHAINS: tuple[tuple[str, Hook, tuple[str, ...]], ...] = (
    (
        "filter-prerouting",
        Hook(
            "filter",
            "prerouting",
            -110,
            "-110: before DNAT (-100), daddr is still the LB IP; source ranges judge new connections, open ones go on",
        ),
        ("ct state new jump firewall-check",),
    ),
    (
        "filter-input",
        Hook(
            "filter",
            "input",
            -110,
            "-110: ahead of host firewalls (0); rejects NodePorts with no endpoints, the node's own too (ECONNREFUSED)",
        ),
        ("ct state new jump nodeport-endpoints-check", "ct state new jump service-endpoints-check"),
    ),
    (
        "filter-forward",
        Hook("filter", "forward", -110, "-110: ahead of host firewalls (0); rejects Service IPs with no endpoints"),
        ("ct state new jump service-endpoints-check", "ct state new jump cluster-ips-check"),
    ),
    (
        "filter-output",
        Hook(
            "filter",
            "output",
            -110,
            "-110: before nat-output's DNAT (-100), daddr is still the Service IP; NodePorts: refused in filter-input",
        ),
        ("ct state new jump firewall-check", "ct state new jump service-endpoints-check"),
    ),
    (
        "filter-output-post-dnat",
        Hook("filter", "output", 0, "0: after nat-output's DNAT, so only a Service IP no rule took is left"),
        ("ct state new jump cluster-ips-check",),
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
        ("jump affinity-record", "jump masquerading"),
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
    ("cluster-ips-check", ("{ip} daddr @cluster-ips reject", "{ip} daddr @service-cidrs drop")),
    (
        "firewall-check",
        (
            "{ip} daddr . meta l4proto . th dport @firewall-ips "
            "{ip} daddr . meta l4proto . th dport . {ip} saddr != @firewall-allow drop",
        ),
    ),
    ("reject-chain", ("reject",)),
    (
        "affinity-record",  # ClientIP affinity: remember client -> endpoint, per the Service's timeout
        tuple(
            f"meta l4proto {proto} ct status dnat {key} vmap @{vmap}"
            for vmap, key in (
                (names.AFFINITY_SERVICES, "ct original {ip} daddr . meta l4proto . ct original proto-dst"),
                (names.AFFINITY_NODEPORTS, "ct original {ip} daddr @nodeport-ips meta l4proto . ct original proto-dst"),
            )
            for proto in ("tcp", "udp", "sctp")
        ),
    ),
    ("mark-for-masquerade", ("meta mark set meta mark | {mark}",)),
    (
        "masquerading",
        (
            "ct status dnat {ip} saddr . {ip} daddr . meta l4proto . th dport @hairpin-endpoints "
            "jump mark-for-masquerade",
            "meta mark & {mark} == 0 return",
            "meta mark set meta mark ^ {mark}",
            "masquerade fully-random",
        ),
    ),
)

# Every set and map is declared with `typeof` (the expressions that match it), never `type`: nft
# >= 1.1.2 stores a `type` declaration's key (and a map's data) as a value expression in the set's
# metadata, which nft <= 1.1.1 (Debian bookworm's 1.0.6) cannot parse: it crashes (SIGSEGV) on any
# listing of the ruleset (a plain `type ipv4_addr` set, any `type … : verdict` or `type … : ipv4_addr`
# map; upstream fixed the reading side in nftables be737a1986bf). `typeof` metadata is the same
# whichever version writes it: the image's nft (trixie, 1.1.x) and the node's (1.0.6) read each
# other's tables (tests/netns/test_nft_versions.py).
FRONTEND_KEY = "{ip} daddr . meta l4proto . th dport"  # Service IP . proto . port
NODEPORT_VMAP = "typeof meta l4proto . th dport : verdict"
FRONTEND_VMAP = f"typeof {FRONTEND_KEY} : verdict"
ADDRESSES = "typeof {ip} daddr"

SETS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        names.SERVICE_IPS,
        FRONTEND_VMAP,
        (),
        "ClusterIPs, externalIPs, LoadBalancer IPs",
    ),
    (names.SERVICE_NODEPORTS, NODEPORT_VMAP, (), "NodePorts"),
    (
        names.NO_ENDPOINT_SERVICES,
        FRONTEND_VMAP,
        (),
        "Service IPs without endpoints",
    ),
    (names.NO_ENDPOINT_NODEPORTS, NODEPORT_VMAP, (), "NodePorts without endpoints"),
    (names.CLUSTER_IPS, ADDRESSES, (), "every ClusterIP: other ports are rejected"),
    (names.NODEPORT_IPS, ADDRESSES, ("interval",), "addresses NodePorts answer on"),
    (names.CLUSTER_CIDRS, ADDRESSES, ("interval",), "pod CIDRs: sources not masqueraded"),
    (names.NODE_POD_CIDRS, ADDRESSES, ("interval",), "this node's pod CIDRs: sources not masqueraded"),
    (names.SERVICE_CIDRS, ADDRESSES, ("interval",), "ServiceCIDRs: unallocated addresses are dropped"),
    (
        names.HAIRPIN_ENDPOINTS,
        "typeof {ip} saddr . {ip} daddr . meta l4proto . th dport",
        (),
        "endpoint . itself . proto . port: hairpin traffic is masqueraded",
    ),
    (
        names.FIREWALL_IPS,
        f"typeof {FRONTEND_KEY}",
        (),
        "LoadBalancer IPs with loadBalancerSourceRanges",
    ),
    (
        names.FIREWALL_ALLOW,
        f"typeof {FRONTEND_KEY} . {{ip}} saddr",
        ("interval",),
        "LoadBalancer IP . proto . port . allowed source range",
    ),
    (
        names.AFFINITY_SERVICES,
        FRONTEND_VMAP,
        (),
        "sessionAffinity ClientIP frontends -> the recording chain of their timeout",
    ),
    (names.AFFINITY_NODEPORTS, NODEPORT_VMAP, (), "sessionAffinity ClientIP NodePorts"),
    (
        names.STICKY_SERVICES,
        FRONTEND_VMAP,
        (),
        "sessionAffinity ClientIP frontends -> the lookup chain of their Service port's record",
    ),
    (
        names.STICKY_NODEPORTS,
        NODEPORT_VMAP,
        (),
        "sessionAffinity ClientIP NodePorts -> the lookup chain of their Service port's record",
    ),
    (
        names.LOCAL_POLICY_SHORT_CIRCUIT,
        FRONTEND_VMAP,
        (),
        "externalTrafficPolicy Local: pod and node traffic goes to all endpoints",
    ),
    (
        names.NODEPORT_SHORT_CIRCUIT,
        NODEPORT_VMAP,
        (),
        "externalTrafficPolicy Local NodePorts: pod and node traffic goes to all endpoints",
    ),
)


# -- localhost NodePorts (gate KubeProxyNFTablesLocalhostNodePorts: ProxyConfig.localhost_rejected) --
# nftables cannot DNAT loopback: TCP is served by the userspace proxy (nftproxy/localhost_proxy/) when
# --nodeport-addresses holds 127.0.0.1, and the other protocols' packets to a loopback NodePort
# (all protocols' without the proxy) are rejected and counted, as kube-proxy's. The check sits in
# filter-input (as kube-proxy's, whose nodeport-endpoints-check only filter-input reaches): the
# sender's packet goes out through lo and is refused on the way in, so a connected UDP socket sees
# ICMP port unreachable (ECONNREFUSED). Refused in filter-output, its send() would fail with EPERM
# instead.
LOOPBACK_DADDR = {Family.IP: "127.0.0.0/8", Family.IP6: "::1"}
LOCALHOST_CHECK = (
    "ct state new {ip} daddr {loopback} meta l4proto . th dport vmap @" + names.LOCALHOST_NODEPORT_REJECT_PORTS
)


def fill(text: str, family: Family, mark: str = masquerade_mark()) -> str:
    return text.format(ip=family.value, addr=family.addr_type, loopback=LOOPBACK_DADDR[family], mark=mark)


def base_sets(
    family: Family,
    rejected: tuple[str, ...] = (),
    nodeport_hosts: bool = True,
    pod_set: str | None = names.CLUSTER_CIDRS,
) -> list[Set]:
    """The fixed sets. ``pod_set``: the one set of pod source CIDRs declared (--detect-local-mode:
    ``cluster-cidrs``, ``node-pod-cidrs``, or none for the interface modes). ``nodeport_hosts``:
    NodePorts are accepted on host addresses only (the default, the node's primary IPs), so
    ``nodeport-ips`` is a plain (hash) set, as kube-proxy's.

    Why not an interval set always: the kernel makes a NEW interval set's elements visible only
    after a transaction's generation has flipped (its backend's commit step, nft_set_rbtree and
    pipapo), so a table replaced in one transaction (a layout change: an upgrade, a rollback)
    briefly has the new NodePort rules with an empty ``nodeport-ips``: a SYN to a NodePort in
    that window is not DNATed and the node refuses it. A hash set's elements turn active with the
    generation itself. Measured (tests/netns/test_replacement_window.py, docs/performance.md):
    1 to 12 refused connections in 300 replacements with the interval set, none with the plain
    one. With CIDRs or ``all`` in --nodeport-addresses the set stays an interval set (its
    elements are ranges), and that window stays."""
    sets = []
    for name, spec, flags, comment in SETS:
        if name in names.POD_SOURCE_SETS and name != pod_set:
            continue
        if name == names.NODEPORT_IPS and nodeport_hosts:
            flags = ()
        sets.append(Set(name, fill(spec, family), flags, comment=comment))
    if rejected:
        sets.append(
            Set(
                names.LOCALHOST_NODEPORT_REJECT_PORTS,
                NODEPORT_VMAP,
                comment="localhost NodePorts of protocols the userspace proxy does not serve: rejected",
            )
        )
    return sets


def base_chains(family: Family, rejected: tuple[str, ...] = (), mark: str = masquerade_mark()) -> list[Chain]:
    """The fixed chains; ``rejected`` (the protocols whose localhost NodePorts are rejected):
    with the localhost NodePort check in filter-input and one counting reject chain each;
    ``mark``: the masquerade mark (``masquerade_mark``)."""
    chains = []
    for name, hook, rules in BASE_CHAINS:
        if rejected and name == "filter-input":
            rules = (*rules, LOCALHOST_CHECK)
        chains.append(Chain(name, tuple(fill(r, family) for r in rules), hook))
    chains += [Chain(name, tuple(fill(r, family, mark) for r in rules)) for name, rules in REGULAR_CHAINS]
    chains += [
        Chain(
            names.localhost_nodeport_reject_chain(proto),
            (f'counter name "{names.localhost_nodeport_rejected_counter(proto)}" reject',),
        )
        for proto in rejected
    ]
    return chains


def base_counters(rejected: tuple[str, ...] = ()) -> list[Counter]:
    return [
        Counter(
            names.localhost_nodeport_rejected_counter(proto),
            f"{proto.upper()} packets to a localhost NodePort: rejected",
        )
        for proto in rejected
    ]


# -- per endpoint count N: one map and a few chains, shared by every Service with N endpoints ----


def _endpoint_map(family: Family, name: str, key: str, n: int, what: str) -> Set:
    ip = family.value
    return Set(f"{name}-{n}", f"typeof {key} . numgen random mod {n} : {ip} daddr . th dport", comment=what)


def _dnat(family: Family, key: str, n: int, map_name: str) -> str:
    ip = family.value
    return f"meta l4proto {{ tcp, udp, sctp }} dnat {ip} to {key} . numgen random mod {n} map @{map_name}-{n}"


def _ip_key(family: Family) -> str:
    return f"{family.value} daddr . meta l4proto . th dport"


NODEPORT_KEY = "meta l4proto . th dport"


def endpoints_map(family: Family, n: int) -> Set:
    return _endpoint_map(family, names.ENDPOINTS, _ip_key(family), n, f"Service IP . proto . port . slot -> one of {n}")


def nodeport_endpoints_map(family: Family, n: int) -> Set:
    return _endpoint_map(family, names.NODEPORT_ENDPOINTS, NODEPORT_KEY, n, f"proto . NodePort . slot -> one of {n}")


def local_endpoints_map(family: Family, n: int) -> Set:
    return _endpoint_map(family, names.LOCAL_ENDPOINTS, _ip_key(family), n, f"Local policy: one of {n} node-local")


def nodeport_local_endpoints_map(family: Family, n: int) -> Set:
    return _endpoint_map(
        family, names.NODEPORT_LOCAL_ENDPOINTS, NODEPORT_KEY, n, f"Local policy NodePort: one of {n} node-local"
    )


def _sticky(family: Family) -> str:
    """A client with a live affinity record goes back to its endpoint: the frontend's Service
    port's lookup chain (no element, or no record: no match, go on)."""
    return f"{family.value} daddr . meta l4proto . th dport vmap @{names.STICKY_SERVICES}"


NODEPORT_STICKY = f"meta l4proto . th dport vmap @{names.STICKY_NODEPORTS}"


def rr_sticky_rules(family: Family) -> tuple[str, ...]:
    """A round-robin chain serves every frontend of its Service port: both lookups."""
    ip = family.value
    return (_sticky(family), f"fib daddr type local {ip} daddr @nodeport-ips {NODEPORT_STICKY}")


def load_balance_chain(family: Family, n: int) -> Chain:
    return Chain(f"load-balance-{n}", (_sticky(family), _dnat(family, _ip_key(family), n, names.ENDPOINTS)))


def cluster_chain(n: int, masquerade: str | None) -> Chain:
    """ClusterIP traffic; ``masquerade`` is the rule selecting what to masquerade (or None)."""
    rules = (masquerade,) if masquerade else ()
    return Chain(f"cluster-{n}", (*rules, f"goto load-balance-{n}"))


def external_chain(n: int) -> Chain:
    """externalIPs and LoadBalancer IPs with externalTrafficPolicy Cluster: always masqueraded."""
    return Chain(f"external-{n}", ("jump mark-for-masquerade", f"goto load-balance-{n}"))


def nodeport_chain(n: int) -> Chain:
    return Chain(f"nodeport-{n}", ("jump mark-for-masquerade", f"goto nodeport-load-balance-{n}"))


def nodeport_load_balance_chain(family: Family, n: int) -> Chain:
    return Chain(
        f"nodeport-load-balance-{n}", (NODEPORT_STICKY, _dnat(family, NODEPORT_KEY, n, names.NODEPORT_ENDPOINTS))
    )


def local_load_balance_chain(family: Family, n: int) -> Chain:
    return Chain(f"local-load-balance-{n}", (_sticky(family), _dnat(family, _ip_key(family), n, names.LOCAL_ENDPOINTS)))


def cluster_local_chain(n: int, masquerade: str | None) -> Chain:
    """ClusterIP with internalTrafficPolicy Local: this node's endpoints only."""
    rules = (masquerade,) if masquerade else ()
    return Chain(f"cluster-local-{n}", (*rules, f"goto local-load-balance-{n}"))


def _short_circuits(key: str, vmap: str, local: str | None) -> tuple[str, ...]:
    """externalTrafficPolicy Local as kube-proxy: pod traffic (``local``: the local-traffic
    detector's match, None without one) and the node's own traffic (masqueraded) skip the policy
    and go to all endpoints."""
    rules = (f"{local} {key} vmap @{vmap}",) if local else ()
    return (*rules, "fib saddr type local jump mark-for-masquerade", f"fib saddr type local {key} vmap @{vmap}")


def external_local_chain(family: Family, n: int, local: str | None) -> Chain:
    """externalIPs / LoadBalancer IPs with externalTrafficPolicy Local: source kept, N local endpoints
    (none: dropped)."""
    last = f"goto local-load-balance-{n}" if n else "drop"
    return Chain(
        f"external-local-{n}", (*_short_circuits(_ip_key(family), names.LOCAL_POLICY_SHORT_CIRCUIT, local), last)
    )


def nodeport_local_chain(family: Family, n: int, local: str | None) -> Chain:
    last = f"goto nodeport-local-load-balance-{n}" if n else "drop"
    return Chain(f"nodeport-local-{n}", (*_short_circuits(NODEPORT_KEY, names.NODEPORT_SHORT_CIRCUIT, local), last))


def nodeport_local_load_balance_chain(family: Family, n: int) -> Chain:
    return Chain(
        f"nodeport-local-load-balance-{n}",
        (NODEPORT_STICKY, _dnat(family, NODEPORT_KEY, n, names.NODEPORT_LOCAL_ENDPOINTS)),
    )


PROTOS = ("tcp", "udp", "sctp")


def affinity_objects(family: Family, tag: str, timeout: int) -> tuple[list[Set], list[Chain]]:
    """One Service port's (one endpoint list's) ClientIP affinity: the dynamic record, keyed by
    the client address alone as kube-proxy's per-endpoint sets, its lookup chain and its
    recording chain. The timeout is in the names: a new timeout is a new record (kube-proxy
    forgets its clients then too). IPv6 keeps the endpoint's address and port in two maps:
    nft 1.0.6 aborts on `update` with data ``ipv6_addr . inet_service``. Declared with typeof
    (see SETS); the record writes ``th dport`` (after ``meta l4proto P``), the type of the
    data's port: with ``tcp dport`` nft lists the rule with "conflicting protocols" errors."""
    ip = family.value
    record, lookup = names.affinity_map(tag, timeout), names.sticky_chain(tag, timeout)
    what = f"sessionAffinity ClientIP ({timeout}s): client -> endpoint"

    def dyn(name: str, spec: str, comment: str) -> Set:
        return Set(name, spec, ("dynamic", "timeout"), f"{timeout}s", comment, dynamic=True)

    if family is Family.IP:
        sets = [dyn(record, f"typeof {ip} saddr : {ip} daddr . th dport", what)]
        dnat = f"dnat {ip} to {ip} saddr map @{record}"
        update = f"update @{record} {{ {ip} saddr : {ip} daddr . th dport }}"
    else:
        port = names.affinity_port_map(tag, timeout)
        sets = [
            dyn(record, f"typeof {ip} saddr : {ip} daddr", what),
            dyn(port, f"typeof {ip} saddr : th dport", f"{what} port"),
        ]
        dnat = f"dnat {ip} to {ip} saddr map @{record} : {ip} saddr map @{port}"
        update = f"update @{record} {{ {ip} saddr : {ip} daddr }} update @{port} {{ {ip} saddr : th dport }}"
    chains = [
        Chain(lookup, (f"meta l4proto {{ tcp, udp, sctp }} {dnat}",)),
        Chain(
            names.affinity_record_chain(tag, timeout),
            tuple(f"meta l4proto {p} {update}" for p in PROTOS),
        ),
    ]
    return sets, chains


def count_objects(
    family: Family, kind: str, n: int, masquerade: str | None, local: str | None
) -> tuple[list[Set], list[Chain]]:
    """The map and chains one (kind, N) pair needs; kinds: lb, nodeport, local, nodeport-local, and
    affinity (N: the timeout in seconds). ``kind@tag``: the same for another load-balancing
    algorithm (balancing.py), renamed with the tag. ``masquerade``: the rule of ClusterIP
    traffic to masquerade; ``local``: the match of pod traffic (the local-traffic detector's)."""
    f = family
    if kind.startswith(balancing.RR):  # round-robin: objects of its own (balancing.py)
        return balancing.rr_objects(family, kind, n, masquerade, local, rr_sticky_rules(family))
    if kind.startswith(f"{names.AFFINITY_KIND}:"):
        return affinity_objects(family, kind.split(":", 1)[1], n)
    base, t = balancing.split_kind(kind)
    if t:
        sets, chains = count_objects(family, base, n, masquerade, local)
        return balancing.retag(sets, chains, t, n, family.value)
    if kind == "lb":
        return [endpoints_map(f, n)], [load_balance_chain(f, n), cluster_chain(n, masquerade), external_chain(n)]
    if kind == "nodeport":
        return [nodeport_endpoints_map(f, n)], [nodeport_load_balance_chain(f, n), nodeport_chain(n)]
    if kind == "local":
        if n == 0:
            return [], [external_local_chain(f, 0, local)]
        return [local_endpoints_map(f, n)], [
            local_load_balance_chain(f, n),
            cluster_local_chain(n, masquerade),
            external_local_chain(f, n, local),
        ]
    if n == 0:
        return [], [nodeport_local_chain(f, 0, local)]
    return [nodeport_local_endpoints_map(f, n)], [
        nodeport_local_load_balance_chain(f, n),
        nodeport_local_chain(f, n, local),
    ]


HASHED_TAGS = (names.SOURCE_HASH_TAG, names.MAGLEV_TAG)
KINDS = ("lb", "nodeport", "local", "nodeport-local", f"{names.AFFINITY_KIND}:0000000000")


def layout_comment(
    family: Family,
    masquerade: str | None,
    local: str | None,
    rejected: tuple[str, ...] = (),
    nodeport_hosts: bool = True,
    pod_set: str | None = names.CLUSTER_CIDRS,
    mark: str = masquerade_mark(),
    extra: object = None,
) -> str:
    """The table comment: layout version and a digest of every rule template this config yields.

    Same comment means same rules for every chain name, so a restarted proxy can adopt the table.
    """
    sizes = {"lb": (1,), "nodeport": (1,), "local": (0, 1), "nodeport-local": (0, 1), KINDS[4]: (1,)}
    parts = [count_objects(family, kind, n, masquerade, local) for kind in KINDS for n in sizes[kind]]
    # the other load-balancing algorithms' templates (a round-robin tag stands for all of them)
    parts += [count_objects(family, f"{kind}@{t}", 2, masquerade, local) for t in HASHED_TAGS for kind in KINDS[:4]]
    parts += [
        count_objects(family, kind, 2, masquerade, local)
        for kind in (balancing.RR_ENTRY, "rr:0000000000s", "rr:0000000000")
    ]
    fixed: list[object] = [base_chains(family, rejected, mark), base_sets(family, rejected, nodeport_hosts, pod_set)]
    if rejected:  # (without, the digest is the one tables already hold)
        fixed.append(base_counters(rejected))
    if extra is not None:  # an option's own objects (service counters: counters.digest_part)
        fixed.append(extra)
    text = repr((*fixed, parts))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"nftproxy layout {LAYOUT} rules {digest}: managed by nftproxy, do not edit"
