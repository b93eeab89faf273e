"""Turn API objects (dicts, as kubectl/the API serve them) into the validated model.

Every problem becomes a Skipped with a reason naming the object; nothing here raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from ipaddress import IPv4Address, ip_address, ip_network
from socket import AF_INET, inet_pton
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
    ServiceCIDR,
    ServicePort,
    Skipped,
)

PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"  # on a slice: not for a proxy (kube-proxy v1.36+)
TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"  # the cluster autoscaler's, before it deletes a node


@dataclass(frozen=True)
class Ignored:
    """Deliberately not proxied (headless, ExternalName, other proxy's label, FQDN or headless slice)."""

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
    if type(value) is str:
        try:  # inet_pton takes exactly canonical dotted-quad IPv4 (no leading zeros, no spaces)
            return IPv4Address(inet_pton(AF_INET, value))
        except (OSError, ValueError):  # ValueError: an embedded NUL (then the slow path says why)
            pass
    return _ip_slow(value, what)


@lru_cache(maxsize=4096)
def _ip_text(text: str) -> IPAddress:
    return ip_address(text.strip())


def _ip_slow(value: Any, what: str) -> IPAddress:
    try:
        return _ip_text(str(value))
    except ValueError:
        raise _Invalid(f"{what}: invalid IP address {value!r}") from None


def _endpoint_address(value: Any, version: int, what: str) -> str:
    """The canonical text of an endpoint's address: for IPv4 that inet_pton takes, the text
    itself (~0.1 µs, no IPv4Address object: the compiler only needs the text)."""
    if version == 4 and type(value) is str:
        try:
            inet_pton(AF_INET, value)
            return value
        except (OSError, ValueError):
            pass
    addr = _ip_slow(value, what)
    if addr.version != version:
        raise _Invalid(f"{what}: {addr} is not an IPv{version} address")
    return str(addr)


def _cidr(value: Any, what: str) -> IPNetwork:
    try:
        return ip_network(str(value).strip(), strict=False)
    except ValueError:
        raise _Invalid(f"{what}: invalid CIDR {value!r}") from None


def _opt_str(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _Invalid(f"{what} is not a string: {value!r}")


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
    label = _map(meta.get("labels"), "metadata.labels").get(PROXY_NAME_LABEL)
    if label != proxy_name:
        return Ignored(f"labelled {PROXY_NAME_LABEL}={label!r}" if label else "not labelled for us")
    spec = _map(obj.get("spec"), "spec")
    svc_type = str(spec.get("type") or "ClusterIP")
    if svc_type == "ExternalName":
        return Ignored("type ExternalName")
    if svc_type not in ("ClusterIP", "NodePort", "LoadBalancer"):
        raise _Invalid(f"unknown spec.type {svc_type!r}")
    cluster_ips = _cluster_ips(spec)
    if cluster_ips is None:
        return Ignored("headless (clusterIP None)")
    ports = _service_ports(spec, svc_type)
    external_ips = tuple(_ip(ip, "spec.externalIPs") for ip in _list(spec.get("externalIPs"), "spec.externalIPs"))
    ranges = tuple(
        _cidr(r, "spec.loadBalancerSourceRanges")
        for r in _list(spec.get("loadBalancerSourceRanges"), "spec.loadBalancerSourceRanges")
    )
    etp, itp = _traffic_policies(spec)
    hc = spec.get("healthCheckNodePort")
    algorithm, warning = balancing.from_annotations(_map(meta.get("annotations"), "metadata.annotations"))
    return Service(
        namespace=ns,
        name=name,
        type=svc_type,
        cluster_ips=cluster_ips,
        ports=ports,
        external_ips=external_ips,
        load_balancer_ips=_load_balancer_ips(obj) if svc_type == "LoadBalancer" else (),
        external_traffic_policy=etp,
        internal_traffic_policy=itp,
        session_affinity_timeout=_affinity_timeout(spec),
        load_balancer_source_ranges=ranges,
        health_check_node_port=_port(hc, "spec.healthCheckNodePort") if hc else None,
        load_balancing=algorithm,
        warnings=(warning,) if warning else (),
        created=str(meta.get("creationTimestamp") or ""),
    )


def _cluster_ips(spec: Mapping[str, Any]) -> tuple[IPAddress, ...] | None:
    """spec.clusterIPs (or the older spec.clusterIP); None for a headless Service."""
    raw_ips = _list(spec.get("clusterIPs"), "spec.clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    if not raw_ips:
        raise _Invalid("no spec.clusterIP allocated")
    if raw_ips[0] == "None":
        return None
    cluster_ips = tuple(_ip(ip, "spec.clusterIPs") for ip in raw_ips)
    if len(cluster_ips) > 1 and len({ip.version for ip in cluster_ips}) != len(cluster_ips):
        raise _Invalid("spec.clusterIPs has two addresses of one family")
    return cluster_ips


def _service_ports(spec: Mapping[str, Any], svc_type: str) -> tuple[ServicePort, ...]:
    ports: list[ServicePort] = []
    seen: set[tuple[str, int]] = set()
    names: set[str] = set()
    for i, p in enumerate(_list(spec.get("ports"), "spec.ports")):
        where = f"spec.ports[{i}]"
        p = _map(p, where)
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
    return tuple(ports)


def _load_balancer_ips(obj: Mapping[str, Any]) -> tuple[IPAddress, ...]:
    """status.loadBalancer.ingress IPs, except those in ipMode Proxy (the LB proxies itself)."""
    lb = _map(_map(obj.get("status"), "status").get("loadBalancer"), "status.loadBalancer")
    lb_ips: list[IPAddress] = []
    for ing in _list(lb.get("ingress"), "status.loadBalancer.ingress"):
        ing = _map(ing, "status.loadBalancer.ingress[]")
        if ing.get("ip") and ing.get("ipMode") != "Proxy":
            lb_ips.append(_ip(ing["ip"], "status.loadBalancer.ingress"))
    return tuple(lb_ips)


def _traffic_policies(spec: Mapping[str, Any]) -> tuple[str, str]:
    etp = str(spec.get("externalTrafficPolicy") or "Cluster")
    itp = str(spec.get("internalTrafficPolicy") or "Cluster")
    for field, value in (("externalTrafficPolicy", etp), ("internalTrafficPolicy", itp)):
        if value not in ("Cluster", "Local"):
            raise _Invalid(f"spec.{field}: unknown value {value!r}")
    return etp, itp


def _affinity_timeout(spec: Mapping[str, Any]) -> int | None:
    if spec.get("sessionAffinity") != "ClientIP":
        return None
    cfg = _map(_map(spec.get("sessionAffinityConfig"), "sessionAffinityConfig").get("clientIP"), "clientIP")
    timeout = cfg.get("timeoutSeconds", 10800)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 86400:
        raise _Invalid(f"sessionAffinityConfig.clientIP.timeoutSeconds {timeout!r} not in 1-86400")
    return timeout


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
    if HEADLESS_LABEL in labels:  # kube-proxy's EndpointSlice informer filters these out
        return Ignored(f"labelled {HEADLESS_LABEL}")
    atype = obj.get("addressType")
    if atype == "FQDN":
        return Ignored("addressType FQDN")
    if atype not in ("IPv4", "IPv6"):
        raise _Invalid(f"unknown addressType {atype!r}")
    version = 4 if atype == "IPv4" else 6
    endpoints = tuple(_endpoint(e, i, version) for i, e in enumerate(_list(obj.get("endpoints"), "endpoints")))
    return EndpointSlice(
        namespace=ns,
        name=name,
        service_name=str(service),
        address_type=str(atype),
        ports=_slice_ports(obj),
        endpoints=endpoints,
        trigger_time=_opt_str(_map(meta.get("annotations"), "metadata.annotations").get(TRIGGER_TIME), TRIGGER_TIME),
    )


def _slice_ports(obj: Mapping[str, Any]) -> tuple[EndpointPort, ...]:
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
    return tuple(ports)


_NO_CONDITIONS: Mapping[str, Any] = {}


def _endpoint(e: Any, i: int, version: int) -> Endpoint:
    """One endpoint (~10^5 per big list: plain dicts take the short way, ~1.5 µs each)."""
    if type(e) is not dict:
        e = _map(e, f"endpoints[{i}]")
    addrs = e.get("addresses")
    if type(addrs) is not list:
        addrs = _list(addrs, f"endpoints[{i}].addresses")
    if not addrs:
        raise _Invalid(f"endpoints[{i}] has no addresses")
    address = _endpoint_address(addrs[0], version, f"endpoints[{i}]")
    cond = e.get("conditions")
    if type(cond) is not dict:
        cond = _map(cond, f"endpoints[{i}].conditions") if cond is not None else _NO_CONDITIONS
    ready = cond.get("ready") is not False
    serving = cond.get("serving")
    hints = e.get("hints")
    zones = nodes = None
    if hints is not None:
        hints = _map(hints, f"endpoints[{i}].hints")
        if (raw := hints.get("forZones")) is not None:
            zones = tuple(str(_map(z, "zone").get("name", "")) for z in _list(raw, f"endpoints[{i}].hints.forZones"))
        if (raw := hints.get("forNodes")) is not None:
            nodes = tuple(str(_map(n, "node").get("name", "")) for n in _list(raw, f"endpoints[{i}].hints.forNodes"))
    node_name = e.get("nodeName")
    if node_name is not None and type(node_name) is not str:  # the message is made only then
        node_name = _opt_str(node_name, f"endpoints[{i}].nodeName")
    zone = e.get("zone")
    if zone is not None and type(zone) is not str:
        zone = _opt_str(zone, f"endpoints[{i}].zone")
    return _new_endpoint(
        address,
        ready,
        serving is not False,  # nil means true (API docs, kube-proxy)
        bool(cond.get("terminating")),
        node_name,
        zone,
        zones,
        nodes,
    )


# The parser's one shortcut (~10^5 Endpoints per big list): a frozen dataclass's __init__ sets
# each field through object.__setattr__; its slots' own descriptors set them in half the time.
# Same object, same type. Figures and the bench that guards it: docs/performance.md.
_ENDPOINT_FIELDS = tuple(f.name for f in fields(Endpoint))
if _ENDPOINT_FIELDS != ("address", "ready", "serving", "terminating", "node_name", "zone", "hint_zones", "hint_nodes"):
    raise TypeError(f"_new_endpoint sets Endpoint's fields by position: update it for {_ENDPOINT_FIELDS}")
_S = tuple(getattr(Endpoint, name).__set__ for name in _ENDPOINT_FIELDS)


def _new_endpoint(
    address: str,
    ready: bool,
    serving: bool,
    terminating: bool,
    node_name: str | None,
    zone: str | None,
    zones: tuple[str, ...] | None,
    nodes: tuple[str, ...] | None,
    _new: Any = object.__new__,
    _s: tuple[Any, ...] = _S,
) -> Endpoint:
    e: Endpoint = _new(Endpoint)
    _s[0](e, address)
    _s[1](e, ready)
    _s[2](e, serving)
    _s[3](e, terminating)
    _s[4](e, node_name)
    _s[5](e, zone)
    _s[6](e, zones)
    _s[7](e, nodes)
    return e


def parse_node(obj: Mapping[str, Any]) -> Node | Skipped:
    _, name = _meta(obj)
    try:
        status = _map(obj.get("status"), "status")
        by_type: dict[str, list[IPAddress]] = {"InternalIP": [], "ExternalIP": []}
        for a in _list(status.get("addresses"), "status.addresses"):
            a = _map(a, "status.addresses[]")
            if isinstance(a.get("type"), str) and a["type"] in by_type:
                by_type[a["type"]].append(_ip(a.get("address"), "status.addresses"))
        meta = _map(obj.get("metadata"), "metadata")
        labels = _map(meta.get("labels"), "metadata.labels")
        taints = _list(_map(obj.get("spec"), "spec").get("taints"), "spec.taints")
        doomed = any(isinstance(t, Mapping) and t.get("key") == TO_BE_DELETED_TAINT for t in taints)
        return Node(
            name=name,
            addresses=tuple(by_type["InternalIP"] + by_type["ExternalIP"]),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            eligible=not meta.get("deletionTimestamp") and not doomed,
        )
    except (_Invalid, KeyError) as e:
        return Skipped("Node", "", name or "?", str(e))


def parse_service_cidr(obj: Mapping[str, Any]) -> ServiceCIDR | Skipped:
    """A ServiceCIDR's ``spec.cidrs`` (kube-proxy drops traffic to their unallocated addresses)."""
    _, name = _meta(obj)
    try:
        spec = _map(obj.get("spec"), "spec")
        cidrs = tuple(_cidr(c, "spec.cidrs") for c in _list(spec.get("cidrs"), "spec.cidrs"))
        for c in cidrs:  # its unallocated addresses are dropped: never the whole address space
            if c.prefixlen < (8 if c.version == 4 else 16):
                raise _Invalid(f"spec.cidrs: {c} is too wide to drop its unallocated addresses")
        return ServiceCIDR(name=name, cidrs=cidrs)
    except _Invalid as e:
        return Skipped("ServiceCIDR", "", name or "?", str(e))
