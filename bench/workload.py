"""Synthetic clusters for the benchmarks: N Services x E endpoints, deterministic. Built with the
one object builder (testkit.k8s.objects) and parsed into the model, as the proxy gets them."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Any

from nftproxy.model.balancing import ANNOTATION
from nftproxy.model.types import EndpointSlice, Service
from testkit.k8s import objects

SERVICE_BASE = int(IPv4Address("10.96.0.0"))
POD_BASE = int(IPv4Address("10.128.0.0"))


def service(i: int, node_port: bool = False, mix: bool = False, lb: bool = False) -> Service:
    """With ``mix``: 10% sessionAffinity, 10% externalTrafficPolicy Local LoadBalancers, 5% of
    them with loadBalancerSourceRanges (the mix of the traffic-policy benchmark). With ``lb``:
    10% round-robin, 10% source-hash (the load-balancing benchmark)."""
    affinity = mix and i % 10 == 1
    local_lb = mix and i % 10 == 2
    ranges = mix and i % 20 == 2
    algorithm = ("round-robin" if i % 10 == 3 else "source-hash" if i % 10 == 4 else None) if lb else None
    spec: dict[str, Any] = {}
    if affinity:
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    if local_lb:
        spec["externalTrafficPolicy"] = "Local"
        spec["healthCheckNodePort"] = 32000 + i % 700
    if ranges:
        spec["loadBalancerSourceRanges"] = ["198.18.0.0/24", f"203.0.{i % 256}.0/24"]
    obj = objects.service(
        f"svc-{i}",
        [str(IPv4Address(SERVICE_BASE + 1 + i))],
        [objects.port(80, "http", node_port=30000 + i % 2768 if node_port or local_lb else None)],
        namespace=f"ns{i % 100}",
        type="LoadBalancer" if local_lb else "NodePort" if node_port else "ClusterIP",
        lb_ips=[str(IPv4Address(int(IPv4Address("198.19.0.0")) + i))] if local_lb else (),
        annotations={ANNOTATION: algorithm} if algorithm else None,
        **spec,
    )
    svc = objects.parsed(obj)
    assert isinstance(svc, Service), svc
    return svc


def endpoint_slice(i: int, endpoints: int, generation: int = 0) -> EndpointSlice:
    # Endpoints spread over 100 nodes, like pods in a real cluster ("node-1" is the proxy's node).
    eps = [
        objects.endpoint(
            str(IPv4Address(POD_BASE + (i * endpoints + j + generation) % (1 << 22))),
            node=f"node-{(i * endpoints + j) % 100}",
        )
        for j in range(endpoints)
    ]
    obj = objects.endpoint_slice(
        f"svc-{i}-abcde", f"svc-{i}", eps, [objects.port(8080, "http")], namespace=f"ns{i % 100}"
    )
    es = objects.parsed(obj)
    assert isinstance(es, EndpointSlice), es
    return es


def cluster(
    services: int, endpoints: int, nodeports: int = 0, mix: bool = False, lb: bool = False
) -> tuple[list[Service], list[EndpointSlice]]:
    svcs = [service(i, node_port=i < nodeports, mix=mix, lb=lb) for i in range(services)]
    slices = [endpoint_slice(i, endpoints) for i in range(services)]
    return svcs, slices
