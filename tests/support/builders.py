"""Model objects for the dataplane tests (fake backend and real kernel): a config, numbered
Services and EndpointSlices, and the table a from-scratch compile gives, to compare with."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.fake import FakeBackend, dump_of
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k

CFG = ProxyConfig(
    node_name="n1",
    node_ips=(ip_address("198.18.0.1"),),
    cluster_cidrs=(ip_network("10.244.0.0/16"),),
)


def svc(i: int, node_port: bool = False, external: bool = False) -> Service:
    ports = [k.port(80, "p", node_port=30000 + i if node_port else None), k.port(53, "u", "UDP")]
    obj = k.service(
        f"s{i}",
        [f"10.96.0.{i + 1}"],
        ports,
        type="NodePort" if node_port else "ClusterIP",
        external_ips=[f"198.19.0.{i + 1}"] if external else (),
    )
    s = k.parsed(obj)
    assert isinstance(s, Service), s
    return s


def eps(i: int, n: int, gen: int = 0) -> EndpointSlice:
    endpoints = [
        k.endpoint(
            f"10.244.{i}.{j + gen + 1}", ready=j % 4 != 3, serving=True, terminating=j % 4 == 3, node=f"n{j % 2}"
        )
        for j in range(n)
    ]
    obj = k.endpoint_slice(f"s{i}-x", f"s{i}", endpoints, [k.port(8080, "p"), k.port(5353, "u", "UDP")])
    es = k.parsed(obj)
    assert isinstance(es, EndpointSlice), es
    return es


def state(fake: FakeBackend, family: Family = Family.IP) -> tuple[dict[str, dict[tuple[str, ...], object]], set[str]]:
    t = fake.tables[(family, "nftproxy")]
    return {k: dict(v) for k, v in t.elements.items()}, set(t.chains)


def expected(dp: Dataplane, family: Family = Family.IP) -> tuple[dict[str, dict[tuple[str, ...], object]], set[str]]:
    want = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), CFG)
    t = next(t for t in want.tables if t.family == family)
    return {k: dict(v) for k, v in t.elements.items()}, set(t.chains)


def expected_dump(dp: Dataplane, config: ProxyConfig = CFG) -> str:
    """The dump (FakeBackend.dump) of a from-scratch compile of the dataplane's inputs: what its
    fake holds when every sync converged (both families, rules and declarations included)."""
    return dump_of(*compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), config).tables)


# One valid Service with its slice, as the API serves them (next to bad input, or as a baseline).
GOOD = [
    k.service("good", ["10.96.0.1"], [k.port(80)]),
    k.endpoint_slice("good-1", "good", [k.endpoint("10.244.1.2")], [k.port(8080)]),
]
