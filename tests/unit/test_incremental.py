"""Incremental syncs: after any sequence of changes the table equals a from-scratch compile,
and a change touches only the elements of the Services it concerns. Uses the fake backend;
tests/netns/test_kernel_sync.py checks the same against the real kernel."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, ip_address, ip_network

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.dataplane import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.kernel import NftError
from nftproxy.nft.objects import Family

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


def test_random_changes_converge_to_the_full_compile() -> None:
    rng = random.Random(7)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    syncs = 0
    for step in range(300):
        i = rng.randrange(12)
        action = rng.choice(["svc", "svc", "slice", "slice", "slice", "del-svc", "del-slice"])
        if action == "svc":
            dp.set_service(svc(i, node_port=rng.random() < 0.5, external=rng.random() < 0.3))
        elif action == "slice":
            dp.set_slice(eps(i, rng.randrange(0, 7), gen=rng.randrange(3)))
        elif action == "del-svc":
            dp.delete_service(f"default/s{i}")
        else:
            dp.delete_slice(f"default/s{i}-x")
        if rng.random() < 0.4:  # several changes may be batched into one sync
            r = dp.sync()
            assert r.full == (syncs == 0), "only the first sync reads the kernel"
            syncs += 1
            assert state(fake) == expected(dp), f"diverged at step {step}"
    dp.sync()
    assert state(fake) == expected(dp)


def test_one_service_change_touches_only_its_elements() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for i in range(50):
        dp.set_service(svc(i, node_port=True))
        dp.set_slice(eps(i, 3))
    assert dp.sync().full
    dp.set_slice(eps(7, 3, gen=1))  # one endpoint replaced
    r = dp.sync()
    assert not r.full
    text = "".join(tx.render() for tx in fake.transactions[-2:])
    # only Service s7's elements: its endpoint slots for 2 ports x (ClusterIP + NodePort) + hairpin
    assert "10.96.0.8" in text and "10.96.0.9 " not in text and "10.96.0.7 " not in text
    assert "add chain" not in text and "flush" not in text
    assert r.element_changes < 30, text


def test_failed_commit_leaves_state_and_next_sync_is_full() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.set_service(svc(1))
    dp.set_slice(eps(1, 2))
    dp.sync()
    before = state(fake)
    dp.set_slice(eps(1, 5))
    fake.fail_next = "Error: Could not process rule: No buffer space available"
    try:
        dp.sync()
        raise AssertionError("sync should have failed")
    except NftError:
        pass
    assert state(fake) == before  # atomic: nothing of the failed transaction
    r = dp.sync()
    assert r.full and state(fake) == expected(dp)


def test_conflict_resolves_when_the_owner_goes_away() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    a = Service("default", "a", "NodePort", (IPv4Address("10.96.0.1"),), (ServicePort("", "TCP", 80, 30000),))
    b = Service("default", "b", "NodePort", (IPv4Address("10.96.0.2"),), (ServicePort("", "TCP", 80, 30000),))
    dp.set_service(a)
    dp.set_service(b)
    dp.sync()
    assert [str(s) for s in dp.stats()[2]] == ["Service default/b: tcp . 30000 is already used by Service default/a"]
    dp.delete_service("default/a")
    dp.sync()
    assert dp.stats()[2] == []
    assert state(fake)[0]["no-endpoint-nodeports"][("tcp", "30000")].comment == "default/b"  # type: ignore[attr-defined]


def test_orphan_slices_and_counts_are_kept_up_to_date_without_a_walk() -> None:
    """The skipped EndpointSlices (no Service) and the counts the syncer reports after every
    change equal what a from-scratch compile says, after random changes."""
    rng = random.Random(11)
    dp = Dataplane(FakeBackend(), CFG)
    for _ in range(200):
        i = rng.randrange(8)
        action = rng.choice(["svc", "slice", "del-svc", "del-slice", "ignore"])
        if action == "svc":
            dp.set_service(svc(i, node_port=rng.random() < 0.5))
        elif action == "slice":
            dp.set_slice(eps(i, rng.randrange(0, 4)))
        elif action == "del-svc":
            dp.delete_service(f"default/s{i}")
        elif action == "ignore":
            dp.ignore_service(f"default/s{i}")
        else:
            dp.delete_slice(f"default/s{i}-x")
        n_svc, n_eps, skipped = dp.stats()
        want = compile_tables(dp.services.values(), dp.slices.values(), CFG, dp.ignored)
        assert (n_svc, n_eps) == (want.services, want.endpoints)
        assert sorted(map(str, skipped)) == sorted(map(str, want.skipped))
