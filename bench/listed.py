"""Shared by the benchmarks: Services and EndpointSlices as `kubectl get svc,endpointslices -A -o json`
lists them (metadata with uid, resourceVersion, creationTimestamp, labels, ownerReferences)."""

from __future__ import annotations

import uuid
from ipaddress import IPv4Address
from typing import Any

from testkit.k8s import objects

SERVICE_BASE = int(IPv4Address("10.96.0.0"))


POD_BASE = int(IPv4Address("10.128.0.0"))


def _meta(kind: str, i: int) -> dict[str, Any]:
    """What the apiserver adds to an object's metadata (uid, resourceVersion, creationTimestamp)."""
    return {
        "creationTimestamp": "2026-11-30T10:00:00Z",
        "resourceVersion": str(1000 + 2 * i + (kind == "slice")),
        "uid": str(uuid.UUID(int=(i << 1) | (kind == "slice"))),
    }


def service(i: int) -> dict[str, Any]:
    ip = str(IPv4Address(SERVICE_BASE + 1 + i))
    obj = objects.service(
        f"svc-{i}",
        [ip],
        [objects.port(80, "http", target=8080)],
        namespace=f"ns{i % 100}",
        labels={"app": f"svc-{i}"},
        metadata=_meta("svc", i),
        internalTrafficPolicy="Cluster",
        ipFamilies=["IPv4"],
        ipFamilyPolicy="SingleStack",
        selector={"app": f"svc-{i}"},
        sessionAffinity="None",
    )
    obj["status"] = {"loadBalancer": {}}
    return obj


def endpoint_ip(i: int, j: int, endpoints: int) -> str:
    return str(IPv4Address(POD_BASE + (i * endpoints + j) % (1 << 22)))


def endpoint_slice(i: int, endpoints: int) -> dict[str, Any]:
    meta = _meta("slice", i)
    meta["generateName"] = f"svc-{i}-"
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
    eps = [
        objects.endpoint(endpoint_ip(i, j, endpoints), node=f"node-{(i * endpoints + j) % 100}")
        for j in range(endpoints)
    ]
    return objects.endpoint_slice(
        f"svc-{i}-abcde",
        f"svc-{i}",
        eps,
        [objects.port(8080, "http")],
        namespace=f"ns{i % 100}",
        labels={"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
        metadata=meta,
    )


def cluster_list(services: int, endpoints: int) -> dict[str, Any]:
    items = [service(i) for i in range(services)] + [endpoint_slice(i, endpoints) for i in range(services)]
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
