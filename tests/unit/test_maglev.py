"""Maglev load balancing (``nftproxy.io/load-balancing: maglev``): the lookup table
(nftproxy/compiler/maglev.py: population, determinism, balance, disruption), the table-size
annotation, what the compiler programs (per-M maps shared by every Service, M elements per
frontend, partial syncs that rewrite only the slots that changed), the localhost proxy's pick and
``nftproxy list``'s lb=maglev. Real packets: tests/netns/test_maglev.py."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import zlib
from dataclasses import replace

import pytest

from nftproxy.compiler import compile_tables, maglev
from nftproxy.compiler.localhost import LocalhostNodePort
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.services import listing, render_text
from nftproxy.diagnose.tableview import read_view
from nftproxy.localhost_proxy.picker import Picker, client_hash
from nftproxy.model.balancing import DEFAULT_TABLE_SIZE, table_size_from_annotations
from nftproxy.model.manifests import classify
from nftproxy.model.parse import parse_service
from nftproxy.model.types import Service
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family, Slot
from nftproxy.nft.transaction import Transaction
from testkit.disruption import slots_moved, source_hash_moved
from testkit.k8s import objects as k
from tests.support.builders import CFG, eps, expected_dump, svc


def endpoints(n: int, start: int = 0) -> list[Slot]:
    return [(f"10.244.{i // 200}.{i % 200 + 2}", "8080") for i in range(start, start + n)]


def moved(a: tuple[Slot, ...], b: tuple[Slot, ...]) -> float:
    """The share of slots (so of clients, the kernel's jhash spreading them evenly) whose endpoint changed."""
    return sum(x != y for x, y in zip(a, b, strict=True)) / len(a)


# -- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [31, 251, 1021])
@pytest.mark.parametrize("n", [2, 3, 7, 10, 30])
def test_every_slot_is_filled_and_each_endpoint_holds_m_over_n_rounded(size: int, n: int) -> None:
    t = maglev.table(endpoints(n), size)
    assert len(t) == size
    counts = {e: t.count(e) for e in endpoints(n)}
    assert set(counts.values()) <= {size // n, -(-size // n)}, counts  # floor or ceil: near-equal
    assert sum(counts.values()) == size


def test_the_table_does_not_depend_on_the_order_of_the_endpoints() -> None:
    eps_ = endpoints(10)
    want = maglev.table(eps_, 251)
    rng = random.Random(3)
    for _ in range(5):
        shuffled = eps_[:]
        rng.shuffle(shuffled)
        assert maglev.table(shuffled, 251) == want


_DIGEST = """
import hashlib, sys
from nftproxy.compiler import maglev
t = maglev.table([(f"10.244.0.{i}", "8080") for i in range(2, 12)], 251)
sys.stdout.write(hashlib.sha256(repr(t).encode()).hexdigest())
"""


def test_the_table_is_the_same_in_every_process() -> None:
    """offset and skip come from SHA-256 of the name, not Python's hash() (randomized per
    process): processes with different hash seeds build the same table."""
    digests = {
        subprocess.run([sys.executable, "-c", _DIGEST], env={**os.environ, "PYTHONHASHSEED": seed},
                       capture_output=True, text=True, check=True).stdout
        for seed in ("1", "2", "random")
    }  # fmt: skip
    assert len(digests) == 1, digests
    assert maglev.permutation("10.244.0.2:8080", 251) == (152, 13)  # pinned: a change moves every client
    assert maglev.permutation("[fd00::2]:8080", 251) != maglev.permutation("fd00::2:8080", 251)


def test_the_size_must_be_prime() -> None:
    with pytest.raises(ValueError, match="not a prime"):
        maglev.table(endpoints(3), 250)


def test_more_endpoints_than_slots_some_get_none() -> None:
    t = maglev.table(endpoints(40), 31)
    assert len(t) == 31 and len(set(t)) == 31


@pytest.mark.parametrize(("size", "bound"), [(251, 1.8), (1021, 1.3), (4093, 1.1)])
def test_a_change_of_one_endpoint_moves_about_one_nth_of_the_clients(size: int, bound: float) -> None:
    n = 10
    eps_ = endpoints(n + 1)
    before, added = maglev.table(eps_[:n], size), maglev.table(eps_, size)
    removed = maglev.table(eps_[1:], size)  # one of the 11 gone
    assert 1 / (n + 1) <= moved(before, added) <= bound / n, moved(before, added)
    assert 1 / (n + 1) <= moved(added, removed) <= bound / n, moved(added, removed)
    # the slots that changed on removal are those of the endpoint removed, and a few more
    gone = {i for i, e in enumerate(added) if e == eps_[0]}
    changed = {i for i in range(size) if added[i] != removed[i]}
    assert gone <= changed
    # source-hash (slot = hash mod N) moves most clients for the same change
    clients = range(20_000)
    hashes = [zlib.crc32(str(c).encode()) for c in clients]
    sh_add = sum(h % n != h % (n + 1) for h in hashes) / len(hashes)
    assert sh_add > 0.85 > 2 * moved(before, added)


# -- the annotation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "want", "warned"),
    [(None, None, False), ("1021", 1021, False), (" 31 ", 31, False), ("4093", 4093, False), ("250", None, True),
     ("29", None, True), ("4099", None, True), ("-251", None, True), ("0x1f", None, True), ("", None, True),
     ("9" * 5000, None, True), ("251.0", None, True)],
)  # fmt: skip
def test_table_size_annotation(value: str | None, want: int | None, warned: bool) -> None:
    ann = {} if value is None else {"nftproxy.io/maglev-table-size": value}
    size, warning = table_size_from_annotations(ann)
    assert size == want and bool(warning) == warned
    if warning:
        assert "is not a prime from 31 to 4093: a Maglev table of 251 slots" in warning and len(warning) < 200


def _svc(ann: dict[str, str]) -> Service:
    s = parse_service(k.service("web", ["10.96.0.10"], [k.port(80, "http")], annotations=ann))
    assert isinstance(s, Service)
    return s


def test_a_bad_size_is_reported_and_the_service_programmed_with_the_default_table() -> None:
    s = _svc({"nftproxy.io/load-balancing": "maglev", "nftproxy.io/maglev-table-size": "1000"})
    assert (s.load_balancing, s.maglev_table_size) == ("maglev", None)
    sl = k.parsed(
        k.endpoint_slice("web-1", "web", [k.endpoint(f"10.244.1.{i}") for i in (2, 3, 4)], [k.port(8080, "http")])
    )
    d = compile_tables([s], [sl], CFG)
    assert [str(x) for x in d.skipped] == [
        "Service default/web: annotation nftproxy.io/maglev-table-size: '1000' is not a prime from 31 to 4093: "
        "a Maglev table of 251 slots (the Service is programmed)"
    ]
    t = next(t for t in d.tables if t.family is Family.IP)
    assert t.elements["service-ips"][("10.96.0.10", "tcp", "80")].value == ("goto cluster-mg-251",)
    assert len(t.elements["endpoints-mg-251"]) == 251


# -- the compiler -----------------------------------------------------------------------------


def _maglev(i: int, size: int | None = None, node_port: bool = True) -> Service:
    return replace(svc(i, node_port=node_port), load_balancing="maglev", maglev_table_size=size)


def _table(services: list[Service], n: int) -> tuple[dict[str, int], set[str]]:
    slices = [replace(eps(i, n), service_name=s.name, name=f"{s.name}-x") for i, s in enumerate(services)]
    t = next(t for t in compile_tables(services, slices, CFG).tables if t.family is Family.IP)
    return {name: len(t.elements.get(name, {})) for name in t.sets}, set(t.chains)


def test_maglev_maps_are_shared_per_table_size_with_m_elements_per_frontend() -> None:
    sets1, chains1 = _table([_maglev(0)], 8)  # 8 endpoints, 6 ready (see builders.eps)
    sets40, chains40 = _table([_maglev(i) for i in range(40)], 8)
    assert set(sets1) == set(sets40) and chains1 == chains40  # no map or chain per Service
    assert {"endpoints-mg-251", "nodeport-endpoints-mg-251"} <= set(sets40)
    assert {"load-balance-mg-251", "cluster-mg-251", "nodeport-load-balance-mg-251"} <= chains40
    # two ports (tcp, udp) per Service, a ClusterIP and a NodePort each: 251 elements per frontend
    assert sets40["endpoints-mg-251"] == 40 * 2 * 251 and sets40["nodeport-endpoints-mg-251"] == 40 * 1 * 251
    small, _ = _table([_maglev(0, size=31)], 8)
    assert small["endpoints-mg-31"] == 2 * 31 and "endpoints-mg-251" not in small
    # one endpoint: nothing to choose, the plain one-slot map
    one, _ = _table([_maglev(0)], 1)
    assert "endpoints-1" in one and not any("-mg-" in s for s in one)


def test_more_endpoints_than_slots_is_reported() -> None:
    s = _maglev(0, size=31, node_port=False)
    sl = replace(eps(0, 48), service_name=s.name, name=f"{s.name}-x")  # 36 ready
    d = compile_tables([s], [sl], CFG)
    assert any("36 endpoints for a Maglev table of 31 slots: 5 of them get no new connections" in str(x)
               for x in d.skipped), d.skipped  # fmt: skip


def test_a_partial_sync_rewrites_only_the_slots_that_changed() -> None:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for i in range(3):
        dp.inputs.set_service(_maglev(i, size=1021, node_port=False))
        dp.inputs.set_slice(eps(i, 13))  # 10 ready (builders.eps: every 4th is terminating)
    dp.sync()
    assert fake.dump() == expected_dump(dp)
    changes: list[int] = []
    apply = fake.apply

    def counting(*txs: Transaction) -> None:
        changes.extend(tx.element_changes() for tx in txs)
        apply(*txs)

    fake.apply = counting  # type: ignore[method-assign]
    dp.inputs.set_slice(eps(0, 14))  # Service 0: one ready endpoint more
    dp.sync()
    assert fake.dump() == expected_dump(dp)
    ready = [f"10.244.0.{j + 1}" for j in range(14) if j % 4 != 3]
    slots = 0  # the slots whose endpoint changed, in the tcp and the udp port's table
    for port in ("8080", "5353"):
        before = maglev.table([(a, port) for a in ready[:-1]], 1021)
        after = maglev.table([(a, port) for a in ready], 1021)
        slots += sum(x != y for x, y in zip(before, after, strict=True))
    assert 0 < slots < 2 * 1021 * 1.3 / 10
    # each changed slot: deleted and added; the new endpoint's 2 hairpin elements (node n1)
    assert sum(changes) == 2 * slots + 2, (changes, slots)


def test_switching_to_and_from_maglev_incrementally_converges_to_the_full_compile() -> None:
    rng = random.Random(5)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for step in range(120):
        i = rng.randrange(6)
        algo = rng.choice([None, "source-hash", "maglev", "maglev"])
        size = rng.choice([None, 31, 61])
        dp.inputs.set_service(
            replace(svc(i, node_port=rng.random() < 0.5, external=rng.random() < 0.3), load_balancing=algo,
                    maglev_table_size=size)
        )  # fmt: skip
        if rng.random() < 0.6:
            dp.inputs.set_slice(eps(i, rng.randrange(0, 9), gen=rng.randrange(3)))
        if rng.random() < 0.4:
            dp.sync()
            assert fake.dump() == expected_dump(dp), f"diverged at step {step}"
    dp.sync()
    assert fake.dump() == expected_dump(dp)


# -- the localhost proxy, nftproxy list ------------------------------------------------------


def test_the_localhost_proxy_picks_as_the_table() -> None:
    eps_ = tuple(endpoints(5))
    spec = LocalhostNodePort(30080, "ns/web", "http", "maglev", 0, False, eps_, (), 61)
    p = Picker(spec)
    t = maglev.table(eps_, 61)
    for client in ("127.0.0.1", "127.0.0.2", "::1", "127.9.9.9"):
        order = list(p.candidates(client))
        assert order[0] == t[client_hash(client) % 61]
        assert sorted(order) == sorted(eps_)  # retries: every other endpoint once
    assert len({next(p.candidates(f"127.0.{i}.1")) for i in range(60)}) == 5
    default = Picker(spec._replace(table_size=0))
    assert (
        next(default.candidates("127.0.0.1")) == maglev.table(eps_, DEFAULT_TABLE_SIZE)[client_hash("127.0.0.1") % 251]
    )


def test_list_shows_lb_maglev_and_each_endpoints_share() -> None:
    objs = [
        k.service("mg", ["10.96.0.19"], [k.port(80, "http")],
                  annotations={"nftproxy.io/load-balancing": "maglev", "nftproxy.io/maglev-table-size": "31"}),
        k.endpoint_slice("mg-1", "mg", [k.endpoint(f"10.244.1.{i}", node="n1") for i in (4, 5, 6)],
                         [k.port(8080, "http")]),
    ]  # fmt: skip
    inputs = classify(objs)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for s in inputs.services:
        dp.inputs.set_service(s)
    for sl in inputs.slices:
        dp.inputs.set_slice(sl)
    dp.sync()
    result = listing([read_view(fake, f, "nftproxy") for f in Family])
    (row,) = [r for r in result.frontends if r.service == "default/mg"]
    assert row.load_balancing == "maglev"
    assert sorted(b.slots for b in row.backends) == [10, 10, 11]
    assert "lb=maglev" in render_text(result)


def test_the_source_hash_prediction_is_the_kernels_reciprocal_scale() -> None:
    """testkit.disruption's model of ``jhash … mod N`` (``hash * N >> 32``, endpoints sorted as
    text), checked by sampling hashes; the moved share is far below a modulo's 1 - 1/N."""
    before = [f"10.244.1.{i}" for i in range(2, 12)]
    after = [*before, "10.244.1.12"]
    rng = random.Random(9)
    hashes = [rng.getrandbits(32) for _ in range(50_000)]
    old, new = sorted(before), sorted(after)
    sampled = sum(old[h * 10 >> 32] != new[h * 11 >> 32] for h in hashes) / len(hashes)
    assert abs(source_hash_moved(before, after) - sampled) < 0.01
    assert source_hash_moved(before, before) == 0
    assert (
        slots_moved(maglev.table([(a, "80") for a in before], 31), maglev.table([(a, "80") for a in after], 31)) < 0.3
    )
