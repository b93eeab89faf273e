"""One Service whose elements the kernel refuses no longer stops the node's syncs (issue 19).

The sync is refused, the Services the kernel refuses are found with dry runs of halves of the
table, left out with a reason, and everything else is programmed in the same sync. Uses the fake
backend; tests/netns/test_refused_service.py does the same on the real kernel.
"""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.backend import NftError
from nftproxy.nft.diff import create
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from nftproxy.nft.transaction import Transaction
from tests.support.poison import BAD_ADDRESS, POISON_PORT, feed, objects, poisoned, refused_by_the_fake

CFG = ProxyConfig(node_name="n1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),))
BAD = 500  # the one Service of 1,000 that is refused


def cluster_ips(fake: FakeBackend) -> set[str]:
    return {key[0] for key in fake.tables[(Family.IP, "nftproxy")].elements["cluster-ips"]}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBackend]:
    monkeypatch.setattr("nftproxy.dataplane.sync.compile_fragment", poisoned())
    backend = FakeBackend()
    backend.refuse = refused_by_the_fake
    yield backend


def test_the_poison_is_refused_whole(fake: FakeBackend) -> None:
    """The injection works: a table holding the bad Service is refused, all of it."""
    dp = Dataplane(fake, CFG)
    feed(dp, objects(1) + objects(BAD, port=POISON_PORT))
    tx = Transaction(Family.IP, "nftproxy")
    create(tx, dp.tables()[0])
    with pytest.raises(NftError, match=BAD_ADDRESS):
        fake.apply(tx)
    assert fake.tables == {}


def test_one_refused_service_of_1000_is_left_out_and_the_others_sync(fake: FakeBackend) -> None:
    dp = Dataplane(fake, CFG)
    objs = [o for i in range(1000) for o in objects(i, port=POISON_PORT if i == BAD else 80)]
    feed(dp, objs)
    result = dp.sync()  # one sync: refused, the guilty one found, the rest committed

    assert result.full
    programmed = cluster_ips(fake)
    assert len(programmed) == 999
    assert "10.96.2.1" not in programmed  # svc-0500's ClusterIP
    _, _, skipped = dp.stats()
    assert [str(s) for s in skipped] == [
        "Service default/svc-0500: the kernel refused its IPv4 rules: Error: Could not resolve hostname: "
        f"Name or service not known [add element ip nftproxy cluster-ips {{ {BAD_ADDRESS} }}]"
    ]
    # bisection: a few dozen dry runs for 1,000 Services, not one per Service: each family's table
    # without Services (2), then 8 parts of 125, the guilty part's halves down to 2 (63, 32, 16,
    # 8, 4, 2: 6 x 2), and the last two alone (the IPv6 table has no Service to check)
    assert fake.checks == 2 + 8 + 6 * 2 + 2


def test_changes_to_the_others_keep_flowing_and_the_fix_brings_it_back(fake: FakeBackend) -> None:
    dp = Dataplane(fake, CFG)
    feed(dp, [o for i in range(600) for o in objects(i, port=POISON_PORT if i == BAD else 80)])
    dp.sync()
    checks = fake.checks

    feed(dp, objects(7, endpoints=3))  # another Service scales down
    assert not dp.sync().full
    service_ips = fake.tables[(Family.IP, "nftproxy")].elements["service-ips"]
    assert service_ips[("10.96.0.8", "tcp", "80")].value == ("goto cluster-3",)  # svc-0007: 3 endpoints
    assert fake.checks == checks  # a partial sync the kernel takes costs no dry run

    feed(dp, objects(BAD, port=80))  # the fix
    assert not dp.sync().full
    assert "10.96.2.1" in cluster_ips(fake)
    assert dp.stats()[2] == []
    assert dp.refused == {}


def test_a_change_to_the_refused_service_alone_is_quarantined_again(fake: FakeBackend) -> None:
    dp = Dataplane(fake, CFG)
    feed(dp, [o for i in range(20) for o in objects(i)])
    dp.sync()
    feed(dp, objects(3, port=POISON_PORT))  # a change the kernel refuses: a partial sync
    result = dp.sync()
    assert result.full  # refused, then the rest committed by a full sync
    assert set(dp.refused) == {(Family.IP, "default/svc-0003")}
    assert "10.96.0.4" not in cluster_ips(fake)  # its old version is gone with it
    assert len(cluster_ips(fake)) == 19


def test_the_refused_are_retried_at_the_next_full_sync(fake: FakeBackend) -> None:
    dp = Dataplane(fake, CFG)
    feed(dp, [o for i in range(20) for o in objects(i, port=POISON_PORT if i == 5 else 80)])
    dp.sync()
    assert set(dp.refused) == {(Family.IP, "default/svc-0005")}

    fake.refuse = None  # say, the node's nft was upgraded and takes it now
    dp.sync()  # a partial sync: nothing changed, it stays out
    assert "10.96.0.6" not in cluster_ips(fake)
    dp.retry_refused()
    dp.forget()
    dp.sync()
    assert "10.96.0.6" in cluster_ips(fake)
    assert dp.refused == {}


def test_a_table_refused_for_no_single_service_still_fails(fake: FakeBackend) -> None:
    dp = Dataplane(fake, CFG)
    feed(dp, [o for i in range(5) for o in objects(i)])
    fake.fail_next = "Error: Could not process rule: No buffer space available"
    with pytest.raises(NftError, match="No buffer space"):
        dp.sync()  # every dry run passes: nobody to blame, the sync fails (and is retried)
    assert dp.refused == {}
    dp.sync()
    assert len(cluster_ips(fake)) == 5
