"""The localhost NodePort proxy's endpoint choice (nftproxy/localhost_proxy/picker.py), pure: plain
endpoint lists, a seeded random source and a hand-moved clock, no sockets. Through the proxy with
real sockets: tests/unit/test_localhost_nodeports.py."""

from __future__ import annotations

import random
from collections import Counter

from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.localhost_proxy.picker import PINS, Picker, client_hash
from nftproxy.nft.objects import Slot

A, B, C = ("10.244.1.2", "8080"), ("10.244.1.3", "8080"), ("10.244.2.2", "8080")


def spec(
    eps: tuple[Slot, ...], algorithm: str = "random", affinity: int = 0, local: tuple[Slot, ...] | None = None
) -> LocalhostNodePort:
    """One TCP NodePort; ``local``: externalTrafficPolicy Local with these node-local endpoints."""
    return LocalhostNodePort(30080, "ns/web", "http", algorithm, affinity, local is not None, eps, local or ())


def first(p: Picker, client: str = "127.0.0.1") -> Slot:
    return next(p.candidates(client))


# -- which endpoint ----------------------------------------------------------------------------


def test_random_spreads_and_a_retry_never_repeats() -> None:
    p = Picker(spec((A, B, C)), random.Random(7))
    seen = Counter(first(p) for _ in range(3000))
    assert set(seen) == {A, B, C} and min(seen.values()) > 800, seen
    for _ in range(50):
        order = list(p.candidates("127.0.0.1"))
        assert sorted(order) == sorted([A, B, C])  # every endpoint once


def test_round_robin_rotates_per_connection_and_retries_go_to_the_next_slots() -> None:
    p = Picker(spec((A, B, C), "round-robin"))
    assert [first(p) for _ in range(6)] == [A, B, C, A, B, C]
    assert list(p.candidates("127.0.0.1")) == [A, B, C]  # a retry: the following slots
    assert list(p.candidates("127.0.0.1")) == [B, C, A]  # one turn per connection, not per retry


def test_source_hash_is_per_client_address() -> None:
    p = Picker(spec((A, B, C), "source-hash"))
    eps = (A, B, C)
    for client in ("127.0.0.1", "127.0.0.2", "::1", "127.9.9.9"):
        start = client_hash(client) % 3
        assert [first(p, client) for _ in range(5)] == [eps[start]] * 5
        assert list(p.candidates(client)) == [eps[(start + i) % 3] for i in range(3)]
    assert len({first(p, f"127.0.0.{i}") for i in range(1, 40)}) == 3  # different clients spread


def test_affinity_keeps_the_endpoint_that_served_within_the_timeout() -> None:
    now = [1000.0]
    p = Picker(spec((A, B, C), "round-robin", affinity=10), clock=lambda: now[0])
    assert first(p) == A
    p.served("127.0.0.1", A)
    assert [first(p) for _ in range(4)] == [A] * 4  # the record wins over the rotation …
    assert list(p.candidates("127.0.0.1")) == [A, B, C]  # … and a retry goes on with the rotation
    assert first(p, "127.0.0.2") == C  # another client: the algorithm
    now[0] += 9
    p.served("127.0.0.1", A)  # served again: a sliding window
    now[0] += 9
    assert first(p) == A
    now[0] += 11  # expired: the algorithm again, the record gone
    assert first(p) == A and "127.0.0.1" not in p.pins
    p.served("127.0.0.1", C)  # the endpoint that answered (after a retry) is the one remembered
    assert first(p) == C
    p.update(spec((A, B), "round-robin", affinity=10))  # its endpoint went away: chosen again
    assert first(p) in (A, B) and "127.0.0.1" not in p.pins
    p.served("127.0.0.1", B)
    p.update(spec((A, B), "round-robin", affinity=30))  # a new timeout forgets every client (as upstream)
    assert p.pins == {}


def test_no_endpoints_no_candidates() -> None:
    assert list(Picker(spec(())).candidates("127.0.0.1")) == []


def test_local_policy_picks_only_this_node_s_endpoints() -> None:
    p = Picker(spec((A, B, C), "round-robin", local=(B,)))
    assert list(p.candidates("127.0.0.1")) == [B]
    p = Picker(spec((A, B, C), local=()))
    assert list(p.candidates("127.0.0.1")) == []  # none here: no candidate (and no listener)


def test_a_new_endpoint_list_is_used_at_once_the_rotation_goes_on() -> None:
    p = Picker(spec((A, B, C), "round-robin"))
    assert first(p) == A
    p.update(spec((B, C), "round-robin"))
    assert [first(p) for _ in range(3)] == [C, B, C]  # turn 1 of the new list, then on


def test_without_affinity_nothing_is_recorded() -> None:
    p = Picker(spec((A, B, C), "round-robin"))
    p.served("127.0.0.1", C)
    assert p.pins == {} and first(p) == A


def test_the_affinity_records_are_bounded_the_expired_ones_dropped() -> None:
    now = [0.0]
    p = Picker(spec((A, B), "random", affinity=10), random.Random(1), clock=lambda: now[0])
    for i in range(PINS):
        p.served(f"127.0.{i // 256}.{i % 256}", A)
    now[0] += 11  # every record expired
    p.served("127.1.0.1", B)
    assert p.pins == {"127.1.0.1": (B, 11.0)}
    for i in range(PINS):  # live ones are kept: the map grows past the bound only while they live
        p.served(f"127.2.{i // 256}.{i % 256}", A)
    assert len(p.pins) == PINS + 1


def test_client_hash_is_stable_across_runs() -> None:
    assert client_hash("127.0.0.1") == 3619153832  # CRC-32: the same on every node and restart
    assert client_hash("::1") != client_hash("127.0.0.1")
