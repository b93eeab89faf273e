"""Turn API objects (dicts, as kubectl/the API serve them) into the validated model.

Every problem becomes a Skipped with a reason naming the object; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any

from nftproxy.model import balancing
from nftproxy.model.types import (
    PROTOCOLS,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    IPAddress,
    IPNetwork,
    Node,
    Service,
    ServicePort,
    Skipped,
)

PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"


@dataclass(frozen=True)
class Ignored:
    """Deliberately not proxied (headless, ExternalName, other proxy's label, FQDN slice)."""

    reason: str


class _Invalid(Exception):
    pass


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "", ""
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Invalid(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Invalid(f"{what} is not a list")
    return value


def _ip(value: Any, what: str) -> IPAddress:
    try:
        return ip_address(str(value).strip())
    except ValueError:
        raise _Invalid(f"{what}: invalid IP address {value!r}") from None


def _cidr(value: Any, what: str) -> IPNetwork:
    try:
        return ip_network(str(value).strip(), strict=False)
    except ValueError:
        raise _Invalid(f"{what}: invalid CIDR {value!r}") from None


def _port(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _Invalid(f"{what}: port {value!r} is not in 1-65535")
    return value


def _protocol(value: Any, what: str) -> str:
    proto = "TCP" if value is None else str(value)
    if proto not in PROTOCOLS:
        raise _Invalid(f"{what}: unknown protocol {value!r}")
    return proto


def parse_service(obj: Mapping[str, Any], proxy_name: str | None = None) -> Service | Skipped | Ignored:
    ns, name = _meta(obj)
    try:
        if not name:
            raise _Invalid("metadata.name is missing")
        return _service(obj, ns, name, proxy_name)
    except _Invalid as e:
        return Skipped("Service", ns, name or "?", str(e))


def _service(obj: Mapping[str, Any], ns: str, name: str, proxy_name: str | None) -> Service | Ignored:
    meta = _map(obj.get("metadata"), "metadata")
    labels = _map(meta.get("labels"), "metadata.labels")
    label = labels.get(PROXY_NAME_LABEL)
    if label != proxy_name:
        return Ignored(f"labelled {PROXY_NAME_LABEL}={label!r}" if label else "not labelled for us")
    spec = _map(obj.get("spec"), "spec")
    svc_type = str(spec.get("type") or "ClusterIP")
    if svc_type == "ExternalName":
        return Ignored("type ExternalName")
    if svc_type not in ("ClusterIP", "NodePort", "LoadBalancer"):
        raise _Invalid(f"unknown spec.type {svc_type!r}")
    raw_ips = _list(spec.get("clusterIPs"), "spec.clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    if not raw_ips:
        raise _Invalid("no spec.clusterIP allocated")
    if raw_ips[0] == "None":
        return Ignored("headless (clusterIP None)")
    cluster_ips = tuple(_ip(ip, "spec.clusterIPs") for ip in raw_ips)
    if len({ip.version for ip in cluster_ips}) != len(cluster_ips):
        raise _Invalid("spec.clusterIPs has two addresses of one family")

    ports: list[ServicePort] = []
    seen: set[tuple[str, int]] = set()
    names: set[str] = set()
    for i, p in enumerate(_list(spec.get("ports"), "spec.ports")):
        p = _map(p, f"spec.ports[{i}]")
        where = f"spec.ports[{i}]"
        proto = _protocol(p.get("protocol"), where)
        port = _port(p.get("port"), where)
        pname = str(p.get("name") or "")
        if (proto, port) in seen:
            raise _Invalid(f"{where}: duplicate port {port}/{proto}")
        if pname in names:
            raise _Invalid(f"{where}: duplicate port name {pname!r}")
        seen.add((proto, port))
        names.add(pname)
        node_port = None
        if svc_type != "ClusterIP" and p.get("nodePort") not in (None, 0):
            node_port = _port(p.get("nodePort"), f"{where}.nodePort")
        ports.append(ServicePort(pname, proto, port, node_port))
    if not ports:
        raise _Invalid("spec.ports is empty")

    external_ips = tuple(_ip(ip, "spec.externalIPs") for ip in _list(spec.get("externalIPs"), "spec.externalIPs"))
    lb_ips: list[IPAddress] = []
    if svc_type == "LoadBalancer":
        status = _map(obj.get("status"), "status")
        lb = _map(status.get("loadBalancer"), "status.loadBalancer")
        for ing in _list(lb.get("ingress"), "status.loadBalancer.ingress"):
            ing = _map(ing, "status.loadBalancer.ingress[]")
            if ing.get("ip") and ing.get("ipMode") != "Proxy":
                lb_ips.append(_ip(ing["ip"], "status.loadBalancer.ingress"))
    ranges = tuple(
        _cidr(r, "spec.loadBalancerSourceRanges")
        for r in _list(spec.get("loadBalancerSourceRanges"), "spec.loadBalancerSourceRanges")
    )
    etp = str(spec.get("externalTrafficPolicy") or "Cluster")
    itp = str(spec.get("internalTrafficPolicy") or "Cluster")
    for field, value in (("externalTrafficPolicy", etp), ("internalTrafficPolicy", itp)):
        if value not in ("Cluster", "Local"):
            raise _Invalid(f"spec.{field}: unknown value {value!r}")
    timeout = None
    if spec.get("sessionAffinity") == "ClientIP":
        cfg = _map(_map(spec.get("sessionAffinityConfig"), "sessionAffinityConfig").get("clientIP"), "clientIP")
        timeout = cfg.get("timeoutSeconds", 10800)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 86400:
            raise _Invalid(f"sessionAffinityConfig.clientIP.timeoutSeconds {timeout!r} not in 1-86400")
    hc = spec.get("healthCheckNodePort")
    annotations = _map(meta.get("annotations"), "metadata.annotations")
    algorithm, warning = balancing.from_annotations(annotations)
    topology = annotations.get("service.kubernetes.io/topology-mode") or annotations.get(
        "service.kubernetes.io/topology-aware-hints"
    )
    return Service(
        namespace=ns,
        name=name,
        type=svc_type,
        cluster_ips=cluster_ips,
        ports=tuple(ports),
        external_ips=external_ips,
        load_balancer_ips=tuple(lb_ips),
        external_traffic_policy=etp,
        internal_traffic_policy=itp,
        session_affinity_timeout=timeout,
        load_balancer_source_ranges=ranges,
        health_check_node_port=_port(hc, "spec.healthCheckNodePort") if hc else None,
        traffic_distribution=str(spec["trafficDistribution"]) if spec.get("trafficDistribution") else None,
        topology_mode=str(topology) if topology else None,
        load_balancing=algorithm,
        warnings=(warning,) if warning else (),
    )


def parse_endpoint_slice(obj: Mapping[str, Any]) -> EndpointSlice | Skipped | Ignored:
    ns, name = _meta(obj)
    try:
        if not name:
            raise _Invalid("metadata.name is missing")
        return _slice(obj, ns, name)
    except _Invalid as e:
        return Skipped("EndpointSlice", ns, name or "?", str(e))


def _slice(obj: Mapping[str, Any], ns: str, name: str) -> EndpointSlice | Ignored:
    meta = _map(obj.get("metadata"), "metadata")
    labels = _map(meta.get("labels"), "metadata.labels")
    service = labels.get(SERVICE_NAME_LABEL)
    if not service:
        raise _Invalid(f"no {SERVICE_NAME_LABEL} label")
    atype = obj.get("addressType")
    if atype == "FQDN":
        return Ignored("addressType FQDN")
    if atype not in ("IPv4", "IPv6"):
        raise _Invalid(f"unknown addressType {atype!r}")
    version = 4 if atype == "IPv4" else 6
    ports: list[EndpointPort] = []
    for i, p in enumerate(_list(obj.get("ports"), "ports")):
        p = _map(p, f"ports[{i}]")
        if p.get("port") is None:
            continue  # "all ports": not usable by a proxy, as upstream
        ports.append(
            EndpointPort(
                str(p.get("name") or ""),
                _protocol(p.get("protocol"), f"ports[{i}]"),
                _port(p.get("port"), f"ports[{i}]"),
            )
        )
    if len({(p.name, p.protocol) for p in ports}) != len(ports):
        raise _Invalid("duplicate port names")
    endpoints: list[Endpoint] = []
    for i, e in enumerate(_list(obj.get("endpoints"), "endpoints")):
        e = _map(e, f"endpoints[{i}]")
        addrs = _list(e.get("addresses"), f"endpoints[{i}].addresses")
        if not addrs:
            raise _Invalid(f"endpoints[{i}] has no addresses")
        addr = _ip(addrs[0], f"endpoints[{i}]")
        if addr.version != version:
            raise _Invalid(f"endpoints[{i}]: {addr} is not an {atype} address")
        cond = _map(e.get("conditions"), f"endpoints[{i}].conditions")
        ready = cond.get("ready") is not False
        serving = ready if cond.get("serving") is None else bool(cond.get("serving"))
        hints = _map(e.get("hints"), f"endpoints[{i}].hints")
        zones = hints.get("forZones")
        nodes = hints.get("forNodes")
        endpoints.append(
            Endpoint(
                address=str(addr),
                ready=ready,
                serving=serving,
                terminating=bool(cond.get("terminating")),
                node_name=e.get("nodeName"),
                zone=e.get("zone"),
                hint_zones=None if zones is None else tuple(str(_map(z, "zone").get("name", "")) for z in zones),
                hint_nodes=None if nodes is None else tuple(str(_map(n, "node").get("name", "")) for n in nodes),
            )
        )
    annotations = _map(meta.get("annotations"), "metadata.annotations")
    return EndpointSlice(
        namespace=ns,
        name=name,
        service_name=str(service),
        address_type=str(atype),
        ports=tuple(ports),
        endpoints=tuple(endpoints),
        trigger_time=annotations.get(TRIGGER_TIME),
    )


def parse_node(obj: Mapping[str, Any]) -> Node | Skipped:
    _, name = _meta(obj)
    try:
        status = _map(obj.get("status"), "status")
        by_type: dict[str, list[IPAddress]] = {"InternalIP": [], "ExternalIP": []}
        for a in _list(status.get("addresses"), "status.addresses"):
            a = _map(a, "status.addresses[]")
            if a.get("type") in by_type:
                by_type[str(a["type"])].append(_ip(a.get("address"), "status.addresses"))
        labels = _map(_map(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
        return Node(
            name=name,
            addresses=tuple(by_type["InternalIP"] + by_type["ExternalIP"]),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        )
    except (_Invalid, KeyError) as e:
        return Skipped("Node", "", name or "?", str(e))
