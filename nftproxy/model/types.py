"""Validated, immutable views of Services, EndpointSlices and Nodes."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

PROTOCOLS = ("TCP", "UDP", "SCTP")


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    protocol: str  # TCP | UDP | SCTP
    port: int
    node_port: int | None = None


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    type: str  # ClusterIP | NodePort | LoadBalancer
    cluster_ips: tuple[IPAddress, ...]
    ports: tuple[ServicePort, ...]
    external_ips: tuple[IPAddress, ...] = ()
    load_balancer_ips: tuple[IPAddress, ...] = ()
    external_traffic_policy: str = "Cluster"
    internal_traffic_policy: str = "Cluster"
    session_affinity_timeout: int | None = None  # seconds when sessionAffinity is ClientIP
    load_balancer_source_ranges: tuple[IPNetwork, ...] = ()
    health_check_node_port: int | None = None
    load_balancing: str | None = None  # nftproxy.io/load-balancing annotation (None: the node's default)
    maglev_table_size: int | None = None  # nftproxy.io/maglev-table-size (None: the default)
    warnings: tuple[str, ...] = ()  # reported, the Service still programmed (e.g. a bad annotation)
    created: str = ""  # metadata.creationTimestamp (RFC 3339, UTC): the older claim wins a contested frontend

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str  # canonical text of the first address: the only one kube-proxy uses
    ready: bool
    serving: bool
    terminating: bool
    node_name: str | None = None
    zone: str | None = None
    hint_zones: tuple[str, ...] | None = None
    hint_nodes: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class EndpointSlice:
    namespace: str
    name: str
    service_name: str
    address_type: str  # IPv4 | IPv6 (FQDN slices are ignored at parse time)
    ports: tuple[EndpointPort, ...]
    endpoints: tuple[Endpoint, ...]
    trigger_time: str | None = None  # endpoints.kubernetes.io/last-change-trigger-time
    # endpoints left out (no address, or not one of the slice's family): reported with the Service
    warnings: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def service_key(self) -> str:
        return f"{self.namespace}/{self.service_name}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    addresses: tuple[IPAddress, ...]  # InternalIPs first, then ExternalIPs
    labels: tuple[tuple[str, str], ...] = ()
    # not being deleted, nor tainted ToBeDeletedByClusterAutoscaler (kube-proxy's NodeEligible:
    # /healthz answers 503 otherwise, so load balancers drain the node; /livez does not)
    eligible: bool = True
    warnings: tuple[str, ...] = ()  # addresses left out (not IPs): reported, the Node still used
    pod_cidrs: tuple[IPNetwork, ...] = ()  # spec.podCIDRs (--detect-local-mode NodeCIDR)

    @property
    def zone(self) -> str | None:
        return dict(self.labels).get("topology.kubernetes.io/zone")


@dataclass(frozen=True)
class ServiceCIDR:
    """A networking.k8s.io/v1 ServiceCIDR: ranges ClusterIPs are allocated from."""

    name: str
    cidrs: tuple[IPNetwork, ...]
    warnings: tuple[str, ...] = ()  # CIDRs left out (invalid, too wide): reported, the rest used


@dataclass(frozen=True, slots=True)
class Skipped:
    """An object left out, and why: reported in logs, Events and ProxyStatus."""

    kind: str
    namespace: str
    name: str
    reason: str
    # the Event's reason: InvalidObject (the object is left out), PortConflict (one frontend of a
    # Service is: claims.py), RefusedByKernel (the kernel refused its rules)
    event: str = "InvalidObject"

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}: {self.reason}"
