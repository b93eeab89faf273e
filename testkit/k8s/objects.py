"""The one builder of Service / EndpointSlice / Node / ServiceCIDR / DaemonSet objects, as the API serves them: used by
tests/, testkit/, bench/ and the demos (the model objects are parsed from these: ``parsed``).

Every optional field is left out unless given, so a builder call shows what the object sets."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nftproxy.model.parse import parse_endpoint_slice, parse_service

Obj = dict[str, Any]

SERVICE_NAME = "kubernetes.io/service-name"


def _metadata(name: str, namespace: str, labels: Obj | None, annotations: Obj | None, extra: Obj | None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    meta.update(extra or {})
    return meta


def service(
    name: str,
    cluster_ips: Sequence[str] = (),
    ports: Sequence[Obj] = (),
    *,
    namespace: str = "default",
    type: str = "ClusterIP",
    external_ips: Sequence[str] = (),
    lb_ips: Sequence[str] = (),
    lb_ingress: Sequence[Obj] = (),
    labels: Obj | None = None,
    annotations: Obj | None = None,
    metadata: Obj | None = None,
    **spec: Any,
) -> Obj:
    """A Service; no ``cluster_ips``: the apiserver allocates one. ``spec`` adds fields as the API
    spells them (``selector=…``, ``sessionAffinity=…``, ``externalTrafficPolicy=…``)."""
    s: Obj = {"type": type}
    if cluster_ips:
        s["clusterIP"], s["clusterIPs"] = cluster_ips[0], list(cluster_ips)
    s["ports"] = list(ports)
    if external_ips:
        s["externalIPs"] = list(external_ips)
    s.update(spec)
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, {} if labels is None else labels, annotations, metadata),
        "spec": s,
    }
    ingress = [{"ip": ip} for ip in lb_ips] + list(lb_ingress)
    if ingress:
        obj["status"] = {"loadBalancer": {"ingress": ingress}}
    return obj


def port(
    port: int,
    name: str = "",
    protocol: str = "TCP",
    node_port: int | None = None,
    *,
    target: int | str | None = None,
) -> Obj:
    """A Service port (``target``: its targetPort), or an EndpointSlice port (no node_port, no target)."""
    p: Obj = {"name": name, "port": port, "protocol": protocol}
    if target is not None:
        p["targetPort"] = target
    if node_port:
        p["nodePort"] = node_port
    return p


def endpoint(
    address: str,
    *,
    ready: bool | None = True,
    serving: bool | None = None,
    terminating: bool | None = False,
    node: str | None = None,
    zone: str | None = None,
    for_zones: Sequence[str] | None = None,
    for_nodes: Sequence[str] | None = None,
) -> Obj:
    """One endpoint; ``serving`` defaults to ``ready``; a condition given as None is left out (unset)."""
    if serving is None and ready is not None:
        serving = ready
    cond = {k: v for k, v in (("ready", ready), ("serving", serving), ("terminating", terminating)) if v is not None}
    e: Obj = {"addresses": [address], "conditions": cond}
    if node:
        e["nodeName"] = node
    if zone:
        e["zone"] = zone
    hints: Obj = {}
    if for_zones is not None:
        hints["forZones"] = [{"name": z} for z in for_zones]
    if for_nodes is not None:
        hints["forNodes"] = [{"name": n} for n in for_nodes]
    if hints:
        e["hints"] = hints
    return e


def endpoint_slice(
    name: str,
    service_name: str | None,
    endpoints: Iterable[Obj],
    ports: Sequence[Obj] | None,
    *,
    namespace: str = "default",
    address_type: str = "IPv4",
    labels: Obj | None = None,
    metadata: Obj | None = None,
) -> Obj:
    """An EndpointSlice of ``service_name`` (None: without the label); ``ports`` None: left out."""
    all_labels = {SERVICE_NAME: service_name} if service_name is not None else {}
    all_labels.update(labels or {})
    obj: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": _metadata(name, namespace, all_labels or None, None, metadata),
        "addressType": address_type,
        "endpoints": list(endpoints),
    }
    if ports is not None:
        obj["ports"] = list(ports)
    return obj


def node(
    name: str,
    addresses: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    pod_cidrs: Sequence[str] = (),
    **labels: str,
) -> Obj:
    """A Node with its addresses (type, address), spec.podCIDRs (when given) and labels."""
    pairs = list(addresses.items()) if isinstance(addresses, Mapping) else list(addresses)
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "status": {"addresses": [{"type": t, "address": a} for t, a in pairs]},
    }
    if pod_cidrs:
        obj["spec"] = {"podCIDR": pod_cidrs[0], "podCIDRs": list(pod_cidrs)}
    return obj


def service_cidr(name: str, *cidrs: str) -> Obj:
    """A ServiceCIDR (networking.k8s.io/v1): ranges ClusterIPs are allocated from."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "spec": {"cidrs": list(cidrs)},
    }


def daemonset(
    name: str,
    namespace: str,
    node_selector: Mapping[str, str] | None = None,
    affinity: Obj | None = None,
    image: str = "nftproxy",
) -> Obj:
    """A DaemonSet (apps/v1) of one container, placed by ``node_selector`` and ``affinity`` (the
    pod spec's, as given): nftproxy's own, as the chart makes it, for what a stop decides."""
    labels = {"app.kubernetes.io/name": name}
    pod: Obj = {"containers": [{"name": name, "image": image}]}
    if node_selector is not None:
        pod["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        pod["affinity"] = affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def parsed(obj: Obj) -> Any:
    """The model object our parser makes of ``obj`` (a Service or an EndpointSlice)."""
    return parse_service(obj) if obj["kind"] == "Service" else parse_endpoint_slice(obj)


def write(path: Path, objects: Iterable[Obj]) -> Path:
    """Multi-document YAML (each document JSON, which is YAML)."""
    path.write_text("\n---\n".join(json.dumps(o) for o in objects) + "\n")
    return path
