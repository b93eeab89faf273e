"""The proxy's configuration, in kube-proxy's terms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from nftproxy.compiler import features, names
from nftproxy.model.types import IPAddress, IPNetwork, Node
from nftproxy.nft.objects import address

PRIMARY = "primary"  # --nodeport-addresses keyword: the node's primary IP of each family
LOOPBACK = {4: ip_network("127.0.0.0/8"), 6: ip_network("::1/128")}
LOCALHOST = {4: IPv4Address("127.0.0.1"), 6: IPv6Address("::1")}  # where localhost NodePorts listen
LOCALHOST_PROTOCOLS = ("tcp", "udp", "sctp")  # a localhost NodePort of each: served (TCP) or rejected
_ALL = {4: ip_network("0.0.0.0/0"), 6: ip_network("::/0")}
_LOOPBACK_IP = {4: ip_address("127.0.0.1"), 6: ip_address("::1")}

# --detect-local-mode: how traffic from this node's pods is told apart, as kube-proxy's
# (cmd/kube-proxy/app/server_linux.go getLocalDetectors, pkg/proxy/util/localdetector.go)
CLUSTER_CIDR = "ClusterCIDR"  # source in --cluster-cidr (the default)
NODE_CIDR = "NodeCIDR"  # source in this node's Node.spec.podCIDRs
BRIDGE_INTERFACE = "BridgeInterface"  # arrived on --pod-bridge-interface
INTERFACE_NAME_PREFIX = "InterfaceNamePrefix"  # arrived on an interface named --pod-interface-name-prefix*
LOCAL_MODES = (CLUSTER_CIDR, NODE_CIDR, BRIDGE_INTERFACE, INTERFACE_NAME_PREFIX)
IFNAMSIZ = 16  # the kernel's limit on an interface name, with its terminating NUL


def interface_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be (the start of) a Linux interface name, or None: empty (kube-proxy's
    validation), longer than 15 bytes, or holding what the kernel refuses in a name ("/", ":",
    whitespace) or what an nft ``iifname`` string cannot hold as such (a quote, "*", "\\")."""
    if not name:
        return "must not be empty"
    if len(name.encode()) >= IFNAMSIZ:
        return f"longer than {IFNAMSIZ - 1} bytes (an interface name's limit)"
    if name in (".", "..") or any(c in '/:"*\\' or c.isspace() or not c.isprintable() for c in name):
        return "not an interface name (no /, :, quotes, *, backslashes or whitespace)"
    return None


@dataclass(frozen=True)
class LocalDetector:
    """One family's local-traffic detector, as an nft match: by source address (a set of the
    config's: ``cluster-cidrs`` or ``node-pod-cidrs``) or by input interface (an ``iifname``
    pattern, ``*`` a wildcard). As kube-proxy's, an interface never matches the node's own
    traffic (nat-output: no input interface), which is thus never local."""

    family: str  # "ip" / "ip6": nft's keyword of the family
    source_set: str | None = None
    interface: str | None = None

    @property
    def local(self) -> str:
        """Matches traffic from this node's pods (kube-proxy's IfLocalNFT)."""
        if self.source_set is not None:
            return f"{self.family} saddr @{self.source_set}"
        return f'iifname "{self.interface}"'

    @property
    def not_local(self) -> str:
        """Matches any other traffic (kube-proxy's IfNotLocalNFT)."""
        if self.source_set is not None:
            return f"{self.family} saddr != @{self.source_set}"
        return f'iifname != "{self.interface}"'


def nodeport_address(text: str) -> tuple[IPNetwork | str, ...]:
    """One --nodeport-addresses value, as kube-proxy v1.37 expands it (expandNodePortAddressKeywords):
    ``primary``; ``localhost`` = 127.0.0.0/8 and ::1/128; ``all`` = 0.0.0.0/0 and ::/0; or a CIDR
    (ValueError if it is none of these)."""
    if text == PRIMARY:
        return (PRIMARY,)
    if text == "localhost":
        return (LOOPBACK[4], LOOPBACK[6])
    if text == "all":
        return (_ALL[4], _ALL[6])
    return (ip_network(text, strict=False),)


@dataclass(frozen=True)
class ProxyConfig:
    node_name: str | None = None
    node_zone: str | None = None  # topology.kubernetes.io/zone of this node (topology hints)
    node_ips: tuple[IPAddress, ...] = ()  # the node's primary IPs (one per family)
    cluster_cidrs: tuple[IPNetwork, ...] = ()  # --cluster-cidr: sources inside are not masqueraded
    detect_local_mode: str = CLUSTER_CIDR  # --detect-local-mode (LOCAL_MODES)
    pod_bridge_interface: str = ""  # --pod-bridge-interface (BridgeInterface mode)
    pod_interface_name_prefix: str = ""  # --pod-interface-name-prefix (InterfaceNamePrefix mode)
    node_pod_cidrs: tuple[IPNetwork, ...] = ()  # this node's Node.spec.podCIDRs (for_node; NodeCIDR mode)
    nodeport_addresses: tuple[IPNetwork | str, ...] = ()  # --nodeport-addresses (CIDRs, PRIMARY); empty: PRIMARY
    masquerade_all: bool = False  # --masquerade-all
    service_proxy_name: str | None = None  # handle only Services with this proxy-name label
    load_balancing: str = "random"  # --load-balancing: for Services without the annotation
    masquerade_bit: int = 14  # --masquerade-bit: the packet mark's bit that asks for masquerading
    service_cidrs: tuple[IPNetwork, ...] = ()  # the cluster's ServiceCIDR objects (networking.k8s.io/v1)
    table: str = "nftproxy"
    service_counters: bool = False  # --service-counters: per-Service traffic counters (compiler/counters.py)
    # kube-proxy's feature gates that are on (compiler/features.py: the cluster version's
    # defaults, --feature-gates over them); none without a cluster to ask (render, apply)
    enabled_gates: frozenset[str] = frozenset()

    def for_node(self, node: Node | None) -> ProxyConfig:
        """This config with the node's Node merged in: its zone (topology hints), its pod CIDRs
        (--detect-local-mode NodeCIDR) and, unless --node-ip set them, its primary IP of each
        family (NodePorts, health checks). The one place this merge is written: render/apply,
        run, verify and explain all call it on the config their flags give."""
        if node is None:
            return self
        ips = self.node_ips or tuple(
            ip for version in (4, 6) for ip in [a for a in node.addresses if a.version == version][:1]
        )
        pods = node.pod_cidrs if self.detect_local_mode == NODE_CIDR else ()  # (else unused: no resync)
        return replace(self, node_zone=node.zone, node_ips=ips, node_pod_cidrs=pods)

    def pod_source_set(self) -> str | None:
        """The set of pod source CIDRs this mode's table declares: ``cluster-cidrs``
        (ClusterCIDR, declared even when empty), ``node-pod-cidrs`` (NodeCIDR), none (the
        interface modes)."""
        return {CLUSTER_CIDR: names.CLUSTER_CIDRS, NODE_CIDR: names.NODE_POD_CIDRS}.get(self.detect_local_mode)

    def pod_sources(self, version: int) -> list[IPNetwork]:
        """The pod source CIDRs of one family in the mode's set: --cluster-cidr's (ClusterCIDR),
        the Node's podCIDRs (NodeCIDR)."""
        cidrs = {CLUSTER_CIDR: self.cluster_cidrs, NODE_CIDR: self.node_pod_cidrs}.get(self.detect_local_mode, ())
        return [n for n in cidrs if n.version == version]

    def local_detector(self, version: int) -> LocalDetector | None:
        """This family's local-traffic detector, or None where kube-proxy's is a no-op: ClusterCIDR
        without a --cluster-cidr of the family (kube-proxy's default mode, whatever the flags), or
        NodeCIDR before the Node has a podCIDR of the family. A no-op detector leaves ClusterIP
        traffic from outside unmasqueraded and pods without the Local-policy short-circuit, as
        kube-proxy's."""
        family = "ip" if version == 4 else "ip6"
        if self.detect_local_mode == BRIDGE_INTERFACE:
            return LocalDetector(family, interface=self.pod_bridge_interface)
        if self.detect_local_mode == INTERFACE_NAME_PREFIX:
            prefix = self.pod_interface_name_prefix
            # nft takes at most 15 bytes with the wildcard (IFNAMSIZ); a prefix of 15 bytes can
            # only be a whole name: matched as one (kube-proxy writes "<prefix>*", which nft refuses)
            whole = len(prefix.encode()) >= IFNAMSIZ - 1
            return LocalDetector(family, interface=prefix if whole else prefix + "*")
        source_set = self.pod_source_set()
        if source_set is None or not self.pod_sources(version):
            return None
        return LocalDetector(family, source_set=source_set)

    def with_gates(self, gates: Iterable[str]) -> ProxyConfig:
        """This config with these feature gates on (and the others off)."""
        return replace(self, enabled_gates=frozenset(gates))

    def with_service_cidrs(self, cidrs: Iterable[IPNetwork]) -> ProxyConfig:
        """This config with the cluster's ServiceCIDRs (sorted: the same set is the same config)."""
        return replace(self, service_cidrs=tuple(sorted(set(cidrs), key=lambda n: (n.version, str(n)))))

    def node_ip(self, version: int) -> IPAddress:
        """This node's IP of one family as kube-proxy's proxier of that family holds it
        (cmd/kube-proxy detectNodeIPs): the first of that family among the node's IPs (--node-ip,
        else the Node's InternalIPs then ExternalIPs), else loopback (127.0.0.1, ::1)."""
        mine = [ip for ip in self.node_ips if ip.version == version]
        return mine[0] if mine else _LOOPBACK_IP[version]

    def nodeport_networks(self, version: int) -> list[IPNetwork]:
        """The CIDRs of one family NodePorts are accepted on, as kube-proxy's NodePortAddresses:
        --nodeport-addresses (default ``primary``: the node's primary IP of that family, unless it
        is loopback) and, when none is of this family, all of its addresses (a /0)."""
        out: list[IPNetwork] = []
        for a in self.nodeport_addresses or (PRIMARY,):
            if isinstance(a, str):
                out += [ip_network(ip) for ip in self.node_ips if ip.version == version and not ip.is_loopback]
            elif a.version == version:
                out.append(a)
        if any(n.prefixlen == 0 for n in out):
            return [_ALL[version]]
        return out or [_ALL[version]]

    def nodeport_ip_elements(self, version: int) -> list[str]:
        """``nodeport-ips``'s elements, as nft lists them: the networks without the loopback
        range, which nftables cannot DNAT (kube-proxy's ``daddr != 127.0.0.0/8``; loopback
        NodePorts are served in userspace, if at all). A prefix is written as one, any other
        interval as ``first-last``."""
        loop = LOOPBACK[version]
        lo, hi = int(loop.network_address), int(loop.broadcast_address)
        spans: list[tuple[int, int]] = []
        for n in sorted(self.nodeport_networks(version), key=lambda n: int(n.network_address)):
            a, b = int(n.network_address), int(n.broadcast_address)
            pieces = [(a, b)] if b < lo or a > hi else [(a, lo - 1), (hi + 1, b)]
            for x, y in pieces:
                if x > y:
                    continue
                if spans and x <= spans[-1][1] + 1:
                    spans[-1] = (spans[-1][0], max(spans[-1][1], y))
                else:
                    spans.append((x, y))
        return [_interval(version, x, y) for x, y in spans]

    def localhost_nodeports(self, version: int) -> bool:
        """Does the userspace proxy serve this family's TCP NodePorts on localhost? With the gate
        KubeProxyNFTablesLocalhostNodePorts on, when --nodeport-addresses has a CIDR other than
        a /0 that holds 127.0.0.1 (or ::1), e.g. the ``localhost`` keyword: kube-proxy 1.38's
        ContainsExplicitLoopback. (1.37 asked for a CIDR starting with a loopback address, so
        127.0.0.2/32 started a proxy on 127.0.0.1, outside what was asked for: the 1.38 fix is
        followed on every cluster.) Checked on the CIDRs as given, as upstream does before a /0
        makes the others moot: ``all,localhost`` serves localhost NodePorts too. ``primary``
        never does (a loopback node IP is skipped)."""
        if features.LOCALHOST_NODEPORTS not in self.enabled_gates:
            return False
        home = LOCALHOST[version]
        return any(not isinstance(a, str) and a.version == version and a.prefixlen > 0 and home in a
                   for a in self.nodeport_addresses)  # fmt: skip

    def localhost_rejected(self, version: int) -> tuple[str, ...]:
        """The protocols whose NodePorts are rejected (and counted) on this family's localhost,
        as kube-proxy's localhostNodePortRejectProtocols: none with the gate off; UDP and SCTP
        while the userspace proxy serves TCP; all three without it."""
        if features.LOCALHOST_NODEPORTS not in self.enabled_gates:
            return ()
        return LOCALHOST_PROTOCOLS[1:] if self.localhost_nodeports(version) else LOCALHOST_PROTOCOLS

    def health_check_addresses(self, local: Iterable[IPAddress]) -> list[str]:
        """The addresses a healthCheckNodePort server listens on, as kube-proxy's: those of the
        node's addresses (``local``) that NodePorts are accepted on and, for a family on which
        they are accepted on every address (a /0), that family's wildcard (kube-proxy 1.36: one
        listener per family)."""
        local = list(local)
        out: list[str] = []
        for version, wildcard in ((4, "0.0.0.0"), (6, "::")):
            nets = self.nodeport_networks(version)
            if any(n.prefixlen == 0 for n in nets):
                out.append(wildcard)
                continue
            out += sorted({str(ip) for ip in local if ip.version == version and any(ip in n for n in nets)})
        return out


def this_node(nodes: Sequence[Node], name: str | None) -> Node | None:
    """This node's Node among some: by --node-name, or the only one when none is named."""
    node = next((n for n in nodes if n.name == name), None)
    if node is None and len(nodes) == 1 and not name:
        node = nodes[0]
    return node


def _interval(version: int, first: int, last: int) -> str:
    def text(n: int) -> str:
        return address(IPv4Address(n) if version == 4 else IPv6Address(n))

    size = last - first + 1
    bits = 32 if version == 4 else 128
    if size & (size - 1) == 0 and first % size == 0:  # a prefix
        length = bits - size.bit_length() + 1
        return text(first) if length == bits else f"{text(first)}/{length}"
    return f"{text(first)}-{text(last)}"
