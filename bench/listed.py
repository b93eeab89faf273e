"""Shared by the benchmarks: Services and EndpointSlices as `kubectl get svc,endpointslices -A -o json`
lists them (metadata with uid, resourceVersion, creationTimestamp, labels, ownerReferences)."""

from __future__ import annotations

import uuid
from ipaddress import IPv4Address
from typing import Any

SERVICE_BASE = int(IPv4Address("10.96.0.0"))


POD_BASE = int(IPv4Address("10.128.0.0"))


def _meta(kind: str, i: int, name: str, namespace: str) -> dict[str, Any]:
    return {
        "creationTimestamp": "2026-11-30T10:00:00Z",
        "name": name,
        "namespace": namespace,
        "resourceVersion": str(1000 + 2 * i + (kind == "slice")),
        "uid": str(uuid.UUID(int=(i << 1) | (kind == "slice"))),
    }


def service(i: int) -> dict[str, Any]:
    ip = str(IPv4Address(SERVICE_BASE + 1 + i))
    meta = _meta("svc", i, f"svc-{i}", f"ns{i % 100}")
    meta["labels"] = {"app": f"svc-{i}"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": ip,
            "clusterIPs": [ip],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "selector": {"app": f"svc-{i}"},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    }


def endpoint_ip(i: int, j: int, endpoints: int) -> str:
    return str(IPv4Address(POD_BASE + (i * endpoints + j) % (1 << 22)))


def endpoint_slice(i: int, endpoints: int) -> dict[str, Any]:
    meta = _meta("slice", i, f"svc-{i}-abcde", f"ns{i % 100}")
    meta["generateName"] = f"svc-{i}-"
    meta["labels"] = {
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        "kubernetes.io/service-name": f"svc-{i}",
    }
    meta["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "blockOwnerDeletion": True,
            "controller": True,
            "kind": "Service",
            "name": f"svc-{i}",
            "uid": str(uuid.UUID(int=i << 1)),
        }
    ]
    return {
        "addressType": "IPv4",
        "apiVersion": "discovery.k8s.io/v1",
        "endpoints": [
            {
                "addresses": [endpoint_ip(i, j, endpoints)],
                "conditions": {"ready": True, "serving": True, "terminating": False},
                "nodeName": f"node-{(i * endpoints + j) % 100}",
            }
            for j in range(endpoints)
        ],
        "kind": "EndpointSlice",
        "metadata": meta,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def cluster_list(services: int, endpoints: int) -> dict[str, Any]:
    items = [service(i) for i in range(services)] + [endpoint_slice(i, endpoints) for i in range(services)]
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
