"""The proxy's configuration, in kube-proxy's terms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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


def this_node(nodes: Sequence[Node], name: str | None) -> Node | None:
    """This node's Node among some: by --node-name, or the only one when none is named."""
    node = next((n for n in nodes if n.name == name), None)
    if node is None and len(nodes) == 1 and not name:
        node = nodes[0]
    return node
