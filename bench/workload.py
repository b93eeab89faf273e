"""Synthetic clusters for the benchmarks: N Services x E endpoints, deterministic."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_network

from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort

SERVICE_BASE = int(IPv4Address("10.96.0.0"))
POD_BASE = int(IPv4Address("10.128.0.0"))


def service(i: int, node_port: bool = False, mix: bool = False, lb: bool = False) -> Service:
    """With ``mix``: 10% sessionAffinity, 10% externalTrafficPolicy Local LoadBalancers, 5% of
    them with loadBalancerSourceRanges (the mix of the traffic-policy benchmark). With ``lb``:
    10% round-robin, 10% source-hash (the load-balancing benchmark)."""
    affinity = mix and i % 10 == 1
    local_lb = mix and i % 10 == 2
    ranges = mix and i % 20 == 2
    return Service(
        namespace=f"ns{i % 100}",
        name=f"svc-{i}",
        type="LoadBalancer" if local_lb else "NodePort" if node_port else "ClusterIP",
        cluster_ips=(IPv4Address(SERVICE_BASE + 1 + i),),
        ports=(ServicePort("http", "TCP", 80, 30000 + i % 2768 if node_port or local_lb else None),),
        load_balancer_ips=(IPv4Address(int(IPv4Address("198.19.0.0")) + i),) if local_lb else (),
        external_traffic_policy="Local" if local_lb else "Cluster",
        session_affinity_timeout=10800 if affinity else None,
        load_balancer_source_ranges=(ip_network("198.18.0.0/24"), ip_network(f"203.0.{i % 256}.0/24"))
        if ranges
        else (),
        health_check_node_port=32000 + i % 700 if local_lb else None,
        load_balancing=("round-robin" if i % 10 == 3 else "source-hash" if i % 10 == 4 else None) if lb else None,
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


def cluster(
    services: int, endpoints: int, nodeports: int = 0, mix: bool = False, lb: bool = False
) -> tuple[list[Service], list[EndpointSlice]]:
    svcs = [service(i, node_port=i < nodeports, mix=mix, lb=lb) for i in range(services)]
    slices = [endpoint_slice(i, endpoints) for i in range(services)]
    return svcs, slices
