"""Load-balancing algorithms in the compiler: the annotation, the objects each costs (bounded per
Service; shared per endpoint count for source-hash), reporting of bad values, and incremental
syncs that switch algorithms converging to the full compile (fake backend; real packets in
tests/netns/test_balancing.py, the golden table in tests/golden/balancing.nft)."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from ipaddress import IPv4Address

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.parse import parse_service
from nftproxy.model.types import Service
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.builders import CFG, eps, expected_dump, svc


def _svc(annotation: str | None) -> k.Obj:
    obj = k.service("web", ["10.96.0.10"], [k.port(80, "http")])
    if annotation is not None:
        obj["metadata"]["annotations"] = {"nftproxy.io/load-balancing": annotation}
    return obj


@pytest.mark.parametrize(
    ("annotation", "want", "warned"),
    [(None, None, False), ("round-robin", "round-robin", False), ("source-hash", "source-hash", False),
     ("random", "random", False), ("lc", "random", True), ("", "random", True)],
)  # fmt: skip
def test_annotation(annotation: str | None, want: str | None, warned: bool) -> None:
    s = parse_service(_svc(annotation))
    assert isinstance(s, Service)
    assert s.load_balancing == want and bool(s.warnings) == warned


def _tables(services: list[Service], n: int, config: ProxyConfig = CFG) -> tuple[set[str], set[str]]:
    slices = [replace(eps(i, n), service_name=s.name, name=f"{s.name}-x") for i, s in enumerate(services)]
    t = next(t for t in compile_tables(services, slices, config).tables if t.family is Family.IP)
    return set(t.sets), set(t.chains)


def _many(count: int, algorithm: str | None) -> list[Service]:
    return [replace(svc(i, node_port=True), load_balancing=algorithm) for i in range(count)]


def test_source_hash_shares_per_count_objects() -> None:
    one = _tables(_many(1, "source-hash"), 3)
    many = _tables(_many(40, "source-hash"), 3)
    assert one == many  # 40 Services with 3 endpoints: the same maps and chains as one
    assert "endpoints-sh-3" in many[0] and "load-balance-sh-3" in many[1]


def test_round_robin_objects_are_per_service_and_bounded() -> None:
    base_sets, base_chains = _tables(_many(1, None), 3)
    sets1, chains1 = _tables(_many(1, "round-robin"), 3)
    sets40, chains40 = _tables(_many(40, "round-robin"), 3)
    shared_sets = {"rr-services", "rr-nodeports", "rr-local-services", "rr-local-nodeports"}
    shared_chains = {"cluster-rr", "external-rr", "external-local-rr", "nodeport-rr", "nodeport-local-rr"}
    assert shared_sets <= sets1 and shared_chains <= chains1
    # per Service: ONE map and ONE chain per port (2 ports here: tcp and udp), whatever its
    # frontends (ClusterIP and NodePort share the port's counter)

    def own(names: set[str]) -> set[str]:
        return {n for n in names if n.startswith("rr-") and n not in shared_sets}

    assert len(own(sets1)) == 2 and len(own(chains1)) == 2
    assert len(own(sets40)) == 80 and len(own(chains40)) == 80
    assert sets40 - base_sets == own(sets40) | shared_sets
    assert chains40 - base_chains == own(chains40) | shared_chains
    # one endpoint: nothing to rotate, no objects of its own
    assert _tables(_many(5, "round-robin"), 1) == _tables(_many(5, None), 1)


def test_node_default_and_annotation_win() -> None:
    default_rr = replace(CFG, load_balancing="round-robin")
    sets, _ = _tables(_many(2, None), 3, default_rr)
    assert "rr-services" in sets
    sets, _ = _tables(_many(2, "random"), 3, default_rr)  # the annotation wins over the node default
    assert "rr-services" not in sets


def test_bad_value_is_reported_and_the_service_programmed_at_random() -> None:
    s = parse_service(_svc("least-connection"))
    assert isinstance(s, Service)
    sl = k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2"), k.endpoint("10.244.1.3")], [k.port(8080, "http")])
    from nftproxy.model.parse import parse_endpoint_slice  # noqa: PLC0415

    slice_ = parse_endpoint_slice(sl)
    d = compile_tables([s], [slice_], replace(CFG, load_balancing="round-robin"))  # type: ignore[list-item]
    assert [str(x) for x in d.skipped] == [
        "Service default/web: annotation nftproxy.io/load-balancing: 'least-connection' is not one of random, "
        "round-robin, source-hash, maglev: load-balanced at random (the Service is programmed)"
    ]
    t = next(t for t in d.tables if t.family is Family.IP)
    assert t.elements["service-ips"][("10.96.0.10", "tcp", "80")].value == ("goto cluster-2",)


def test_switching_algorithms_incrementally_converges_to_the_full_compile() -> None:
    rng = random.Random(11)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for step in range(200):
        i = rng.randrange(8)
        algo = rng.choice([None, "random", "round-robin", "source-hash"])
        dp.inputs.set_service(
            replace(svc(i, node_port=rng.random() < 0.5, external=rng.random() < 0.3), load_balancing=algo)
        )
        if rng.random() < 0.5:
            dp.inputs.set_slice(eps(i, rng.randrange(0, 5), gen=rng.randrange(3)))
        if rng.random() < 0.4:
            dp.sync()
            assert fake.dump() == expected_dump(dp), f"diverged at step {step}"
    dp.sync()
    assert fake.dump() == expected_dump(dp)


def test_round_robin_tags_differ_per_service_and_port() -> None:
    two = [replace(svc(i), load_balancing="round-robin") for i in (1, 2)]
    sets, _ = _tables(two, 3)
    rr = {s for s in sets if re.fullmatch(r"rr-[0-9a-f]{10}-3", s)}
    assert len(rr) == 4, rr  # 2 Services x 2 ports (tcp, udp)
    assert rr == {s for s in _tables(two, 3)[0] if s in rr}  # stable
    assert IPv4Address("10.96.0.2") in two[0].cluster_ips
