"""Random sequences of changes: after every sync, what the backend holds equals a from-scratch
compile of the same inputs (the fake backend; then the real kernel, read back, in a namespace)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.verify import compare, equal_contents, read_kernel
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.backend import Backend
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import KernelBackend
from testkit.lab.netlab import bare_netns
from tests.fuzz import strategies as S
from tests.support.fuzzing import examples

CFG = ProxyConfig(
    node_name="n1",
    node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
    cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
)
NAMES = ["a", "b", "c", "d", "e", S.LONG]
NS = ["default", "ns1"]
EXT = [IPv4Address("198.19.0.1"), IPv6Address("fd00:198:19::1"), IPv6Address("::ffff:198.19.0.1")]
LB = [IPv4Address("198.19.1.1"), IPv6Address("fd00:198:19::9"), IPv6Address("::ffff:198.19.1.1")]
# with conflicts: other Services' ClusterIPs too (a tenant naming kube-dns's ClusterIP, say)
CLUSTER_IPS = [IPv4Address("10.96.0.1"), IPv4Address("10.96.0.2"), IPv6Address("fd00:10:96::3")]
CREATED = ["", "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"]
# Source ranges as the parser hands them over (host bits cleared, duplicates kept): every shape of
# issue 19, both families in one list; read back from the kernel, they must equal a fresh compile.
RANGES = st.lists(st.sampled_from([ip_network(c, strict=False) for c in S.SHAPED_CIDRS]), max_size=3).map(
    lambda rs: rs + rs[:1]  # the first one twice: a duplicate
)


@st.composite
def services(draw: Any, unique_ips: bool, ipv6_affinity: bool = True) -> Service:
    ns, name = draw(st.sampled_from(NS)), draw(st.sampled_from(NAMES))
    i = (NS.index(ns) * len(NAMES) + NAMES.index(name)) if unique_ips else draw(st.integers(0, 3))
    v4, v6 = IPv4Address(f"10.96.0.{i + 1}"), IPv6Address(f"fd00:10:96::{i + 1}")
    ips = draw(st.sampled_from([(v4,), (v6,), (v4, v6), (v6, v4)]))
    svc_type = draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]))
    raw_ports = draw(
        st.lists(
            st.tuples(st.sampled_from(["TCP", "UDP", "SCTP"]), st.sampled_from([53, 80, 443, 65535, 1])),
            min_size=1,
            max_size=3,
            unique=True,
        )
        if unique_ips
        else st.sampled_from([[("TCP", 80)], [("TCP", 80), ("UDP", 53)]])
    )
    ports = tuple(
        ServicePort(
            ["http", "dns", ""][k % 3] if k < 3 else f"p{k}",
            proto,
            port,
            (30000 + i * 8 + k) if svc_type != "ClusterIP" and (unique_ips or draw(st.booleans())) else None,
        )
        for k, (proto, port) in enumerate(raw_ports)
    )
    ext = draw(st.lists(st.sampled_from(EXT if unique_ips else EXT + CLUSTER_IPS), max_size=2))
    lb = draw(st.lists(st.sampled_from(LB if unique_ips else LB + CLUSTER_IPS), max_size=2))
    if unique_ips:  # each its own, in either family; IPv6 IPv4-mapped too (nft lists it dotted)
        ext = [IPv4Address(f"198.19.0.{i + 1}"), IPv6Address(f"fd00:198:19::{i + 1:x}")][: len(ext)]
        lb = [IPv4Address(f"198.19.1.{i + 1}"), IPv6Address(f"::ffff:198.19.3.{i + 1}")][: len(lb)]
        lb = lb if svc_type == "LoadBalancer" else []
    etp = draw(st.sampled_from(["Cluster", "Local"]))
    return Service(
        ns,
        name,
        svc_type,
        ips,
        ports,
        external_ips=tuple(dict.fromkeys(ext)),
        load_balancer_ips=tuple(dict.fromkeys(lb)) if svc_type == "LoadBalancer" else (),
        external_traffic_policy=etp,
        internal_traffic_policy=draw(st.sampled_from(["Cluster", "Local"])),
        session_affinity_timeout=draw(st.sampled_from([None, None, 10, 10800]))
        if ipv6_affinity or all(ip.version == 4 for ip in ips)
        else None,
        load_balancer_source_ranges=tuple(draw(RANGES)),
        health_check_node_port=32000 + i if svc_type == "LoadBalancer" and etp == "Local" else None,
        created=draw(st.sampled_from(CREATED)),
    )


@st.composite
def slices(draw: Any) -> EndpointSlice:
    ns, svc = draw(st.sampled_from(NS)), draw(st.sampled_from(NAMES))
    v6 = draw(st.booleans())
    pool = S.EP6 if v6 else S.EP4
    ports = draw(
        st.lists(
            st.tuples(st.sampled_from(["http", "dns", "", "p3"]), st.sampled_from(["TCP", "UDP", "SCTP"])),
            max_size=3,
            unique=True,
        )
    )
    endpoints = draw(
        st.lists(
            st.builds(
                Endpoint,
                address=st.sampled_from(pool),
                ready=st.booleans(),
                serving=st.booleans(),
                terminating=st.booleans(),
                node_name=st.sampled_from([None, "n1", "n2"]),
                zone=st.sampled_from([None, "z1"]),
                hint_zones=st.sampled_from([None, ("z1",), ("z2",)]),
                hint_nodes=st.sampled_from([None, ("n1",), ("n2",)]),
            ),
            max_size=7,
        )
    )
    return EndpointSlice(
        ns,
        f"{svc[:50]}-{draw(st.sampled_from(['x', 'y']))}{'6' if v6 else ''}",
        svc,
        "IPv6" if v6 else "IPv4",
        tuple(EndpointPort(n, p, draw(st.sampled_from([8080, 5353, 1, 65535]))) for n, p in ports),
        tuple(endpoints),
    )


def changes(unique_ips: bool, ipv6_affinity: bool = True) -> st.SearchStrategy[list[tuple[str, Any]]]:
    op = st.one_of(
        st.tuples(st.just("svc"), services(unique_ips, ipv6_affinity)),
        st.tuples(st.just("slice"), slices()),
        st.tuples(st.just("slice"), slices()),
        st.tuples(st.just("del-svc"), st.tuples(st.sampled_from(NS), st.sampled_from(NAMES))),
        st.tuples(st.just("del-slice"), slices()),
        st.tuples(st.just("ignore"), st.tuples(st.sampled_from(NS), st.sampled_from(NAMES))),
        st.tuples(st.just("node"), st.sampled_from([None, "z1", "z2"])),
        st.tuples(st.just("sync"), st.none()),
        st.tuples(st.just("sync"), st.none()),
    )
    return st.lists(op, min_size=1, max_size=40)


def apply(dp: Dataplane, change: tuple[str, Any]) -> bool:
    """Apply one change; True when it was a sync."""
    what, arg = change
    if what == "svc":
        dp.inputs.set_service(arg)
    elif what == "slice":
        dp.inputs.set_slice(arg)
    elif what == "del-svc":
        dp.inputs.delete_service(f"{arg[0]}/{arg[1]}")
    elif what == "del-slice":
        dp.inputs.delete_slice(arg.key)
    elif what == "ignore":
        dp.inputs.ignore_service(f"{arg[0]}/{arg[1]}")
    elif what == "node":
        dp.set_config(replace(dp.config, node_zone=arg))
    else:
        dp.sync()
        return True
    return False


def assert_converged(dp: Dataplane, backend: Backend, where: str) -> None:
    want = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), dp.config, dp.inputs.ignored)
    applied = read_kernel(backend, dp.config.table)
    diffs = [str(d) for d in compare(want.tables, applied)]
    assert diffs == [], f"{where}: incremental != from scratch:\n" + "\n".join(diffs[:30])
    for t in want.tables:  # the raw check the words explain
        assert equal_contents(t, applied[t.family]), f"{where}: {t.family} contents differ"


def run_sequence(backend: Backend, seq: list[tuple[str, Any]]) -> None:
    dp = Dataplane(backend, CFG)
    for step, change in enumerate([*seq, ("sync", None)]):
        if apply(dp, change):
            assert_converged(dp, backend, f"after step {step}")


@settings(max_examples=examples(200, 4000))
@given(seq=changes(unique_ips=True))
def test_incremental_equals_full_compile_fake(seq: list[tuple[str, Any]]) -> None:
    run_sequence(FakeBackend(), seq)


@settings(max_examples=examples(300, 3000))
@given(seq=changes(unique_ips=False))
def test_incremental_equals_full_compile_with_conflicts_fake(seq: list[tuple[str, Any]]) -> None:
    """Services claiming one frontend (one ClusterIP, one NodePort, an externalIP or LB IP that is
    another's ClusterIP or externalIP): the same holder whatever the order of arrival (claims.py)."""
    run_sequence(FakeBackend(), seq)


@pytest.fixture(scope="module")
def kernel() -> Iterator[KernelBackend]:
    with bare_netns("vf") as name:
        backend = KernelBackend(name)
        try:
            yield backend
        finally:
            backend.close()


@pytest.mark.netns
@settings(max_examples=examples(12, 300))
@given(seq=changes(unique_ips=True))
def test_incremental_equals_full_compile_kernel(kernel: KernelBackend, seq: list[tuple[str, Any]]) -> None:
    Dataplane(kernel, CFG).cleanup()  # each example starts from an empty namespace
    run_sequence(kernel, seq)
