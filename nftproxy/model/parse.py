"""Turn API objects (dicts, as kubectl/the API serve them) into the validated model.

Every problem becomes a Skipped with a reason naming the object; nothing here raises. Addresses
and CIDRs are read with kube-proxy's parsers (``sloppy``: the spellings an apiserver before 1.36
stored), and where kube-proxy leaves out one bad item (an externalIP, a source range, a load
balancer IP, an endpoint, a Node address, a ServiceCIDR's CIDR) only that item is left out, with a
warning reported as skips are (the object is still used).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from socket import AF_INET, inet_pton
from typing import Any

from nftproxy.model import balancing
from nftproxy.model.sloppy import go_trim_space, parse_cidr_sloppy, parse_ip_sloppy
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


def _sloppy_ip(value: Any) -> IPAddress | None:
    """kube-proxy's ParseIPSloppy (no trimming); None for what it refuses, and for a non-string."""
    return parse_ip_sloppy(value) if type(value) is str else None


def _ip(value: Any, what: str) -> IPAddress:
    """An address the object cannot do without (a ClusterIP)."""
    addr = _sloppy_ip(value)
    if addr is None:
        raise _Invalid(f"{what}: invalid IP address {value!r}")
    return addr


def _left_out(what: str, problem: str, kind: str = "Service") -> str:
    return f"{what}: {problem}: left out (the rest of the {kind} is used)"


def _ips(values: Any, what: str, warnings: list[str]) -> tuple[IPAddress, ...]:
    """A list of addresses: a bad one is left out with a warning (kube-proxy's MapIPsByIPFamily
    logs "Skipping invalid IP" and goes on)."""
    out = []
    for i, value in enumerate(_list(values, what)):
        addr = _sloppy_ip(value)
        if addr is None:
            warnings.append(_left_out(f"{what}[{i}]", f"invalid IP address {value!r}"))
        else:
            out.append(addr)
    return tuple(out)


def _source_ranges(values: Any, what: str, warnings: list[str]) -> tuple[IPNetwork, ...]:
    """loadBalancerSourceRanges, as kube-proxy reads them: each trimmed (Go's TrimSpace: the API
    allows padding), then ParseCIDRSloppy; a bad one is left out with a warning (kube-proxy's
    MapCIDRsByIPFamily: "Invalid CIDR ignored")."""
    out = []
    for i, value in enumerate(_list(values, what)):
        net = parse_cidr_sloppy(go_trim_space(value)) if type(value) is str else None
        if net is None:
            warnings.append(_left_out(f"{what}[{i}]", f"invalid CIDR {value!r}"))
        else:
            out.append(net)
    return tuple(out)


def _endpoint_address(value: Any, version: int) -> str | None:
    """The canonical text of an endpoint's address (kube-proxy: ParseIPSloppy(...).String()), None
    when it is not one of the slice's family. For IPv4 that inet_pton takes, the text itself
    (~0.1 µs, no IPv4Address object: the compiler only needs the text)."""
    if version == 4 and type(value) is str:
        try:
            inet_pton(AF_INET, value)
            return value
        except (OSError, ValueError):  # ValueError: an embedded NUL
            pass
    return _address_text(value, version) if type(value) is str else None


@lru_cache(maxsize=4096)
def _address_text(text: str, version: int) -> str | None:
    """(IPv6 endpoints: str() of an IPv6Address costs ~1.5 µs, paid once per address.)"""
    addr = parse_ip_sloppy(text)
    return str(addr) if addr is not None and addr.version == version else None


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
    warnings: list[str] = []
    external_ips = _ips(spec.get("externalIPs"), "spec.externalIPs", warnings)
    ranges = _source_ranges(spec.get("loadBalancerSourceRanges"), "spec.loadBalancerSourceRanges", warnings)
    lb_ips = _load_balancer_ips(obj, warnings) if svc_type == "LoadBalancer" else ()
    etp, itp = _traffic_policies(spec)
    hc = spec.get("healthCheckNodePort")
    algorithm, warning = balancing.from_annotations(_map(meta.get("annotations"), "metadata.annotations"))
    if warning:
        warnings.append(warning)
    table_size, warning = balancing.table_size_from_annotations(_map(meta.get("annotations"), "metadata.annotations"))
    if warning:
        warnings.append(warning)
    return Service(
        namespace=ns,
        name=name,
        type=svc_type,
        cluster_ips=cluster_ips,
        ports=ports,
        external_ips=external_ips,
        load_balancer_ips=lb_ips,
        external_traffic_policy=etp,
        internal_traffic_policy=itp,
        session_affinity_timeout=_affinity_timeout(spec),
        load_balancer_source_ranges=ranges,
        health_check_node_port=_port(hc, "spec.healthCheckNodePort") if hc else None,
        load_balancing=algorithm,
        maglev_table_size=table_size,
        warnings=tuple(warnings),
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


def _load_balancer_ips(obj: Mapping[str, Any], warnings: list[str]) -> tuple[IPAddress, ...]:
    """status.loadBalancer.ingress IPs in ipMode VIP (unset: VIP; Proxy: the LB proxies itself),
    as kube-proxy's IsVIPMode; a bad one is left out (kube-proxy: silently)."""
    lb = _map(_map(obj.get("status"), "status").get("loadBalancer"), "status.loadBalancer")
    lb_ips: list[IPAddress] = []
    for i, ing in enumerate(_list(lb.get("ingress"), "status.loadBalancer.ingress")):
        ing = _map(ing, f"status.loadBalancer.ingress[{i}]")
        if not ing.get("ip") or ing.get("ipMode") not in (None, "VIP"):
            continue
        addr = _sloppy_ip(ing["ip"])
        if addr is None:
            warnings.append(_left_out(f"status.loadBalancer.ingress[{i}].ip", f"invalid IP address {ing['ip']!r}"))
        else:
            lb_ips.append(addr)
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
    endpoints: list[Endpoint] = []
    warnings: list[str] = []
    for i, e in enumerate(_list(obj.get("endpoints"), "endpoints")):
        endpoint = _endpoint(e, i, version, warnings)
        if endpoint is not None:
            endpoints.append(endpoint)
    return EndpointSlice(
        namespace=ns,
        name=name,
        service_name=str(service),
        address_type=str(atype),
        ports=_slice_ports(obj),
        endpoints=tuple(endpoints),
        trigger_time=_opt_str(_map(meta.get("annotations"), "metadata.annotations").get(TRIGGER_TIME), TRIGGER_TIME),
        warnings=tuple(warnings),
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


def _endpoint(e: Any, i: int, version: int, warnings: list[str]) -> Endpoint | None:
    """One endpoint (~10^5 per big list: plain dicts take the short way, ~1.5 µs each); None,
    with a warning, for one kube-proxy cannot use: no address, or a first address that is not an
    address of the slice's family (kube-proxy skips one without addresses, "Ignoring invalid
    endpoint port with empty address"; the API refuses a bad one)."""
    if type(e) is not dict:
        e = _map(e, f"endpoints[{i}]")
    addrs = e.get("addresses")
    if type(addrs) is not list:
        addrs = _list(addrs, f"endpoints[{i}].addresses")
    if not addrs:
        warnings.append(_left_out(f"endpoints[{i}]", "no addresses", "EndpointSlice"))
        return None
    address = _endpoint_address(addrs[0], version)
    if address is None:
        problem = f"{addrs[0]!r} is not an IPv{version} address"
        warnings.append(_left_out(f"endpoints[{i}].addresses[0]", problem, "EndpointSlice"))
        return None
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
        warnings: list[str] = []
        for i, a in enumerate(_list(status.get("addresses"), "status.addresses")):
            a = _map(a, f"status.addresses[{i}]")
            if isinstance(a.get("type"), str) and a["type"] in by_type:
                # the API does not validate them; kube-proxy's GetNodeHostIPs skips a bad one
                addr = _sloppy_ip(a.get("address"))
                if addr is None:
                    problem = f"invalid {a['type']} {a.get('address')!r}"
                    warnings.append(_left_out(f"status.addresses[{i}]", problem, "Node"))
                else:
                    by_type[a["type"]].append(addr)
        meta = _map(obj.get("metadata"), "metadata")
        labels = _map(meta.get("labels"), "metadata.labels")
        spec = _map(obj.get("spec"), "spec")
        taints = _list(spec.get("taints"), "spec.taints")
        doomed = any(isinstance(t, Mapping) and t.get("key") == TO_BE_DELETED_TAINT for t in taints)
        # the first podCIDR of each family, as kube-proxy's NodeCIDR detector (MapCIDRsByIPFamily,
        # cidrs[0]); one it cannot parse is left out with a warning, as kube-proxy skips it
        pod_cidrs: dict[int, IPNetwork] = {}
        for i, value in enumerate(_list(spec.get("podCIDRs"), "spec.podCIDRs")):
            net = parse_cidr_sloppy(value) if type(value) is str else None
            if net is None:
                warnings.append(_left_out(f"spec.podCIDRs[{i}]", f"invalid CIDR {value!r}", "Node"))
            else:
                pod_cidrs.setdefault(net.version, net)
        return Node(
            name=name,
            addresses=tuple(by_type["InternalIP"] + by_type["ExternalIP"]),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            eligible=not meta.get("deletionTimestamp") and not doomed,
            warnings=tuple(warnings),
            pod_cidrs=tuple(pod_cidrs[v] for v in sorted(pod_cidrs)),
        )
    except (_Invalid, KeyError) as e:
        return Skipped("Node", "", name or "?", str(e))


# A ServiceCIDR's unallocated addresses are dropped (after DNAT, in forward and output, as
# kube-proxy does): a CIDR wider than this would drop traffic to pods, nodes and the Internet.
# kube-proxy v1.37 programs any width (a 0.0.0.0/0 ServiceCIDR cuts every new forwarded or
# outgoing IPv4 connection of the node); nftproxy leaves such a CIDR out, alone, with a warning.
WIDEST_SERVICE_CIDR = {4: 8, 6: 16}


def parse_service_cidr(obj: Mapping[str, Any]) -> ServiceCIDR | Skipped:
    """A ServiceCIDR's ``spec.cidrs`` (kube-proxy drops traffic to their unallocated addresses).
    Each CIDR on its own: a bad or too wide one is left out with a warning, the other (the other
    family's) is used. The API keeps them canonical (strict validation since ServiceCIDRs exist)."""
    _, name = _meta(obj)
    try:
        spec = _map(obj.get("spec"), "spec")
        cidrs: list[IPNetwork] = []
        warnings: list[str] = []
        for i, value in enumerate(_list(spec.get("cidrs"), "spec.cidrs")):
            net = parse_cidr_sloppy(value) if type(value) is str else None
            if net is None:
                warnings.append(_left_out(f"spec.cidrs[{i}]", f"invalid CIDR {value!r}", "ServiceCIDR"))
            elif net.prefixlen < WIDEST_SERVICE_CIDR[net.version]:
                widest = WIDEST_SERVICE_CIDR[net.version]
                problem = f"{net} is wider than /{widest}: too wide to drop its unallocated addresses"
                warnings.append(_left_out(f"spec.cidrs[{i}]", problem, "ServiceCIDR"))
            else:
                cidrs.append(net)
        return ServiceCIDR(name=name, cidrs=tuple(cidrs), warnings=tuple(warnings))
    except _Invalid as e:
        return Skipped("ServiceCIDR", "", name or "?", str(e))


def warnings_report(value: Node | ServiceCIDR) -> Skipped | None:
    """A Node's or ServiceCIDR's warnings as one report (used, and reported as skips are)."""
    if not value.warnings:
        return None
    kind = "Node" if isinstance(value, Node) else "ServiceCIDR"
    return Skipped(kind, "", value.name or "?", "; ".join(value.warnings))
