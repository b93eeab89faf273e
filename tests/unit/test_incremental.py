"""Incremental syncs: after any sequence of changes the table equals a from-scratch compile,
and a change touches only the elements of the Services it concerns. Uses the fake backend;
tests/netns/test_kernel_sync.py checks the same against the real kernel."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv6Address

import pytest

from nftproxy.compiler import compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import Endpoint, EndpointPort, EndpointSlice, Service, ServicePort
from nftproxy.nft.backend import NftError
from nftproxy.nft.fake import FakeBackend
from tests.support.builders import CFG, eps, expected_dump, state, svc


def test_random_changes_converge_to_the_full_compile() -> None:
    rng = random.Random(7)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    syncs = 0
    for step in range(300):
        i = rng.randrange(12)
        action = rng.choice(["svc", "svc", "slice", "slice", "slice", "del-svc", "del-slice"])
        if action == "svc":
            dp.inputs.set_service(svc(i, node_port=rng.random() < 0.5, external=rng.random() < 0.3))
        elif action == "slice":
            dp.inputs.set_slice(eps(i, rng.randrange(0, 7), gen=rng.randrange(3)))
        elif action == "del-svc":
            dp.inputs.delete_service(f"default/s{i}")
        else:
            dp.inputs.delete_slice(f"default/s{i}-x")
        if rng.random() < 0.4:  # several changes may be batched into one sync
            r = dp.sync()
            assert r.full == (syncs == 0), "only the first sync reads the kernel"
            syncs += 1
            assert fake.dump() == expected_dump(dp), f"diverged at step {step}"
    dp.sync()
    assert fake.dump() == expected_dump(dp)


def test_one_service_change_touches_only_its_elements() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for i in range(50):
        dp.inputs.set_service(svc(i, node_port=True))
        dp.inputs.set_slice(eps(i, 3))
    assert dp.sync().full
    dp.inputs.set_slice(eps(7, 3, gen=1))  # one endpoint replaced
    r = dp.sync()
    assert not r.full
    text = "".join(tx.render() for tx in fake.transactions[-2:])
    # only Service s7's elements: its 3 endpoint slots (all renumbered: each deleted and added
    # again) on the ClusterIP for 2 ports (12) and on the TCP NodePort (6; the UDP port has none),
    # and the hairpin entries of its one endpoint on this node, one per port, replaced (4)
    assert "10.96.0.8" in text and "10.96.0.9 " not in text and "10.96.0.7 " not in text
    assert "add chain" not in text and "flush" not in text
    assert r.element_changes == 2 * (3 * 2 + 3 * 1) + 4, text
    assert r.operations == 2 * 3, text  # a deletion and an addition in each of its 3 sets


def test_failed_commit_leaves_state_and_next_sync_is_full() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.inputs.set_service(svc(1))
    dp.inputs.set_slice(eps(1, 2))
    dp.sync()
    before = fake.dump()
    dp.inputs.set_slice(eps(1, 5))
    fake.fail_next = "Error: Could not process rule: No buffer space available"
    with pytest.raises(NftError, match="No buffer space"):
        dp.sync()
    assert fake.dump() == before  # atomic: nothing of the failed transaction
    r = dp.sync()
    assert r.full and fake.dump() == expected_dump(dp)


def test_conflict_resolves_when_the_owner_goes_away() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    a = Service("default", "a", "NodePort", (IPv4Address("10.96.0.1"),), (ServicePort("", "TCP", 80, 30000),))
    b = Service("default", "b", "NodePort", (IPv4Address("10.96.0.2"),), (ServicePort("", "TCP", 80, 30000),))
    dp.inputs.set_service(a)
    dp.inputs.set_service(b)
    dp.sync()
    assert [str(s) for s in dp.stats()[2]] == [
        "Service default/b: tcp . 30000 is left out for this Service: Service default/a claims it too, and comes "
        "first by name; its other frontends are programmed"
    ]
    assert state(fake)[0]["no-endpoint-services"][("10.96.0.2", "tcp", "80")].comment == "default/b"  # type: ignore[attr-defined]
    dp.inputs.delete_service("default/a")
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
            dp.inputs.set_service(svc(i, node_port=rng.random() < 0.5))
        elif action == "slice":
            dp.inputs.set_slice(eps(i, rng.randrange(0, 4)))
        elif action == "del-svc":
            dp.inputs.delete_service(f"default/s{i}")
        elif action == "ignore":
            dp.inputs.ignore_service(f"default/s{i}")
        else:
            dp.inputs.delete_slice(f"default/s{i}-x")
        n_svc, n_eps, skipped = dp.stats()
        want = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), CFG, dp.inputs.ignored)
        assert (n_svc, n_eps) == (want.services, want.endpoints)
        assert sorted(map(str, skipped)) == sorted(map(str, want.skipped))


def test_an_element_two_services_share_stays_until_the_last_one_goes() -> None:
    """Two Services with the same pods (hairpin entries of both) and two ports each (the ClusterIP
    entry twice in one Service): the shared entries are counted, not duplicated or dropped early."""
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for i in (1, 2):
        dp.inputs.set_service(svc(i))
        same = eps(1, 4)
        dp.inputs.set_slice(EndpointSlice("default", f"s{i}-x", f"s{i}", "IPv4", same.ports, same.endpoints))
    dp.sync()
    hairpin = set(state(fake)[0]["hairpin-endpoints"])
    assert hairpin and fake.dump() == expected_dump(dp)
    dp.inputs.delete_service("default/s1")
    dp.sync()
    assert set(state(fake)[0]["hairpin-endpoints"]) == hairpin, "s2 still needs them"
    assert ("10.96.0.2",) not in state(fake)[0]["cluster-ips"] and ("10.96.0.3",) in state(fake)[0]["cluster-ips"]
    assert fake.dump() == expected_dump(dp)
    dp.inputs.delete_service("default/s2")
    dp.sync()
    assert not state(fake)[0].get("hairpin-endpoints") and not state(fake)[0].get("cluster-ips")
    assert fake.dump() == expected_dump(dp)
    assert not any(a.store.counts or a.store.values for a in dp.assemblies.values())


def test_services_in_both_families_count_once() -> None:
    """ProxyStatus' `services`: a dual-stack Service is one Service, whichever families have it."""
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)

    def service(name: str, *ips: IPv4Address | IPv6Address) -> Service:
        return Service("default", name, "ClusterIP", ips, (ServicePort("p", "TCP", 80),))

    def slice_(name: str, family: str, addr: str) -> EndpointSlice:
        ep = Endpoint(addr, ready=True, serving=True, terminating=False, node_name="n1")
        return EndpointSlice("default", f"{name}-{family}", name, family, (EndpointPort("p", "TCP", 8080),), (ep,))

    dp.inputs.set_service(service("dual", IPv4Address("10.96.0.10"), IPv6Address("fd00::10")))
    dp.inputs.set_slice(slice_("dual", "IPv4", "10.244.0.10"))
    dp.inputs.set_slice(slice_("dual", "IPv6", "fd00:244::10"))
    dp.inputs.set_service(service("v4", IPv4Address("10.96.0.11")))
    dp.inputs.set_slice(slice_("v4", "IPv4", "10.244.0.11"))
    dp.inputs.set_service(service("v6", IPv6Address("fd00::12")))
    dp.inputs.set_slice(slice_("v6", "IPv6", "fd00:244::12"))
    dp.sync()
    assert [len(a.fragments) for a in dp.assemblies.values()] == [2, 2]
    assert dp.stats()[:2] == (3, 4)
    dp.inputs.delete_service("default/v4")
    dp.sync()
    assert dp.stats()[:2] == (2, 3)
