"""Localhost NodePorts: what the userspace proxy (nftproxy/localhost_proxy/) serves of one TCP
NodePort on a loopback address, decided by the compiler with the table, from the same endpoint
choice (endpoints.categorize), so the proxy and the table never disagree on who serves a port.

nftables cannot DNAT traffic to loopback (kube-proxy's ``daddr != 127.0.0.0/8``), so with
--nodeport-addresses naming a loopback CIDR (``localhost``) kube-proxy v1.37 serves TCP NodePorts
on 127.0.0.1 and ::1 in userspace and rejects the other protocols (skeleton.py). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from nftproxy.nft.objects import Slot


class LocalhostNodePort(NamedTuple):
    node_port: int
    service: str  # namespace/name
    port: str  # the Service port's name, else its number
    algorithm: str  # random | round-robin | source-hash | maglev: the annotation, else --load-balancing
    affinity: int  # sessionAffinity ClientIP: its timeout in seconds; 0: none
    external_local: bool  # externalTrafficPolicy Local
    cluster: tuple[Slot, ...]  # (address, port): the endpoints the table uses for Cluster policy
    local: tuple[Slot, ...]  # this node's, for Local policy
    table_size: int = 0  # maglev: the slots of its table (nftproxy.io/maglev-table-size)

    @property
    def endpoints(self) -> tuple[Slot, ...]:
        """Those a localhost client is sent to, as kube-proxy v1.37's: this node's under
        externalTrafficPolicy Local, else all (topology-filtered) of them. None: no listener,
        so a client is refused."""
        return self.local if self.external_local else self.cluster

    @property
    def name(self) -> str:
        """``namespace/name:port`` for logs."""
        return f"{self.service}:{self.port}"
