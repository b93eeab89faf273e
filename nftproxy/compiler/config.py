"""The proxy's configuration, in kube-proxy's terms."""

from __future__ import annotations

from dataclasses import dataclass

from nftproxy.model.types import IPAddress, IPNetwork


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
