"""Model objects for the dataplane tests (fake backend and real kernel): a config, numbered
Services and EndpointSlices, and the table a from-scratch compile gives, to compare with."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_address, ip_network

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from tests import k8sobjects as k

CFG = ProxyConfig(
    node_name="n1",
    node_ips=(ip_address("198.18.0.1"),),
    cluster_cidrs=(ip_network("10.244.0.0/16"),),
)


def svc(i: int, node_port: bool = False, external: bool = False) -> Service:
    return Service(
        "default",
        f"s{i}",
        "NodePort" if node_port else "ClusterIP",
        (IPv4Address(f"10.96.0.{i + 1}"),),
        (ServicePort("p", "TCP", 80, 30000 + i if node_port else None), ServicePort("u", "UDP", 53)),
        external_ips=(IPv4Address(f"198.19.0.{i + 1}"),) if external else (),
    )


def eps(i: int, n: int, gen: int = 0) -> EndpointSlice:
    return EndpointSlice(
        "default",
        f"s{i}-x",
        f"s{i}",
        "IPv4",
        (EndpointPort("p", "TCP", 8080), EndpointPort("u", "UDP", 5353)),
        tuple(
            Endpoint(
                f"10.244.{i}.{j + gen + 1}",
                ready=j % 4 != 3,
                serving=True,
                terminating=j % 4 == 3,
                node_name=f"n{j % 2}",
            )
            for j in range(n)
        ),
    )


def state(fake: FakeBackend, family: Family = Family.IP) -> tuple[dict[str, dict[tuple[str, ...], object]], set[str]]:
    t = fake.tables[(family, "nftproxy")]
    return {k: dict(v) for k, v in t.elements.items()}, set(t.chains)


def expected(dp: Dataplane, family: Family = Family.IP) -> tuple[dict[str, dict[tuple[str, ...], object]], set[str]]:
    want = compile_tables(dp.services.values(), dp.slices.values(), CFG)
    t = next(t for t in want.tables if t.family == family)
    return {k: dict(v) for k, v in t.elements.items()}, set(t.chains)


# One valid Service with its slice, as the API serves them (next to bad input, or as a baseline).
GOOD = [
    k.service("good", ["10.96.0.1"], [k.port(80)]),
    k.endpoint_slice("good-1", "good", [k.endpoint("10.244.1.2")], [k.port(8080)]),
]
