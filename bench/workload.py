"""Synthetic clusters for the benchmarks: N Services x E endpoints, deterministic."""

from __future__ import annotations

from ipaddress import IPv4Address

from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort

SERVICE_BASE = int(IPv4Address("10.96.0.0"))
POD_BASE = int(IPv4Address("10.128.0.0"))


def service(i: int, node_port: bool = False) -> Service:
    return Service(
        namespace=f"ns{i % 100}",
        name=f"svc-{i}",
        type="NodePort" if node_port else "ClusterIP",
        cluster_ips=(IPv4Address(SERVICE_BASE + 1 + i),),
        ports=(ServicePort("http", "TCP", 80, 30000 + i % 2768 if node_port else None),),
    )


def endpoint_slice(i: int, endpoints: int, generation: int = 0) -> EndpointSlice:
    # Endpoints spread over 100 nodes, like pods in a real cluster ("node-1" is the proxy's node).
    eps = tuple(
        Endpoint(
            str(IPv4Address(POD_BASE + (i * endpoints + j + generation) % (1 << 22))),
            True,
            True,
            False,
            f"node-{(i * endpoints + j) % 100}",
        )
        for j in range(endpoints)
    )
    return EndpointSlice(
        namespace=f"ns{i % 100}",
        name=f"svc-{i}-abcde",
        service_name=f"svc-{i}",
        address_type="IPv4",
        ports=(EndpointPort("http", "TCP", 8080),),
        endpoints=eps,
    )


def cluster(services: int, endpoints: int, nodeports: int = 0) -> tuple[list[Service], list[EndpointSlice]]:
    svcs = [service(i, node_port=i < nodeports) for i in range(services)]
    slices = [endpoint_slice(i, endpoints) for i in range(services)]
    return svcs, slices
