"""Small builders for Service / EndpointSlice / Node dicts, as the API serves them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


def service(
    name: str,
    cluster_ips: Sequence[str],
    ports: Sequence[Obj],
    *,
    namespace: str = "default",
    type: str = "ClusterIP",
    external_ips: Sequence[str] = (),
    lb_ips: Sequence[str] = (),
    labels: Obj | None = None,
    **spec: Any,
) -> Obj:
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "type": type,
            "clusterIP": cluster_ips[0],
            "clusterIPs": list(cluster_ips),
            "ports": list(ports),
            **spec,
        },
    }
    if external_ips:
        obj["spec"]["externalIPs"] = list(external_ips)
    if lb_ips:
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": ip} for ip in lb_ips]}}
    return obj


def port(port: int, name: str = "", protocol: str = "TCP", node_port: int | None = None) -> Obj:
    p: Obj = {"name": name, "port": port, "protocol": protocol}
    if node_port:
        p["nodePort"] = node_port
    return p


def endpoint(
    address: str, *, ready: bool = True, serving: bool | None = None, terminating: bool = False, node: str | None = None
) -> Obj:
    cond: Obj = {"ready": ready, "terminating": terminating}
    cond["serving"] = ready if serving is None else serving
    e: Obj = {"addresses": [address], "conditions": cond}
    if node:
        e["nodeName"] = node
    return e


def endpoint_slice(
    name: str,
    service_name: str,
    endpoints: Iterable[Obj],
    ports: Sequence[Obj],
    *,
    namespace: str = "default",
    address_type: str = "IPv4",
) -> Obj:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kubernetes.io/service-name": service_name}},
        "addressType": address_type,
        "ports": list(ports),
        "endpoints": list(endpoints),
    }


def write(path: Path, objects: Iterable[Obj]) -> Path:
    """Multi-document YAML (each document JSON, which is YAML)."""
    path.write_text("\n---\n".join(json.dumps(o) for o in objects) + "\n")
    return path
