"""tests/conformance/differences.py: each accepted difference names the kube-proxy releases it is
about, and a DIFF against another release is not accepted."""

from __future__ import annotations

from tests.conformance import differences as d


def test_every_accepted_difference_names_its_releases() -> None:
    assert set(d.RELEASES) == set(d.INTENTIONAL)
    assert all(set(r) <= set(d.COMPARED) for r in d.RELEASES.values())


def test_a_fix_nftproxy_follows_everywhere_differs_from_the_old_release_only() -> None:
    assert d.accepted("udp-service-deleted", 37)
    assert d.accepted("udp-service-deleted", 38) is None  # kube-proxy 1.38 deletes the flows too
    assert d.accepted("udp-service-deleted-externalip", 38) is None


def test_a_difference_of_every_release_is_accepted_against_each() -> None:
    for minor in d.COMPARED:
        assert d.accepted("node-ip-changed", minor)
        assert d.accepted("udp-endpoint-terminating", minor)
    assert d.accepted("no-such-case", 38) is None
