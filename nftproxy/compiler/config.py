"""The proxy's configuration, in kube-proxy's terms."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from ipaddress import ip_network

from nftproxy.model.types import IPAddress, IPNetwork, Node


@dataclass(frozen=True)
class ProxyConfig:
    node_name: str | None = None
    node_zone: str | None = None  # topology.kubernetes.io/zone of this node (topology hints)
    node_ips: tuple[IPAddress, ...] = ()  # the node's primary IPs (one per family)
    cluster_cidrs: tuple[IPNetwork, ...] = ()  # --cluster-cidr: sources inside are not masqueraded
    nodeport_addresses: tuple[IPNetwork, ...] = ()  # --nodeport-addresses; empty: node_ips
    masquerade_all: bool = False  # --masquerade-all
    service_proxy_name: str | None = None  # handle only Services with this proxy-name label
    load_balancing: str = "random"  # --load-balancing: for Services without the annotation
    table: str = "nftproxy"

    def for_node(self, node: Node | None) -> ProxyConfig:
        """This config with the node's Node merged in: its zone (topology hints) and, unless
        --node-ip set them, its primary IP of each family (NodePorts, health checks). The one
        place this merge is written: render/apply, run, verify and explain all call it on the
        config their flags give."""
        if node is None:
            return self
        ips = self.node_ips or tuple(
            ip for version in (4, 6) for ip in [a for a in node.addresses if a.version == version][:1]
        )
        return replace(self, node_zone=node.zone, node_ips=ips)

    def nodeport_networks(self, version: int) -> list[IPNetwork]:
        """The addresses of one family NodePorts are accepted on: the --nodeport-addresses CIDRs
        of that family or, without the flag, the node's primary IP of that family."""
        if self.nodeport_addresses:
            return [n for n in self.nodeport_addresses if n.version == version]
        return [ip_network(ip) for ip in self.node_ips if ip.version == version]

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
