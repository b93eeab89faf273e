"""ServiceCIDRs (networking.k8s.io/v1): their unallocated addresses are dropped, as kube-proxy's
``daddr { serviceCIDRs } drop``; a change is applied at the next sync (kube-proxy waits for its
hourly full sync: tests/conformance/differences.py)."""

from __future__ import annotations

import asyncio

from nftproxy.model.manifests import classify
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.syncer import elements, make, svc

cidr = k.service_cidr


def test_service_cidrs_change_the_drop_set_at_the_next_sync() -> None:
    async def go() -> list[set[tuple[str, ...]]]:
        syncer, fake = make()
        syncer.changes.mark_loaded()
        seen = []
        syncer.changes.service_changed("default/a", svc("a", "10.96.0.1"))
        syncer.changes.service_cidr_changed("kubernetes", cidr("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"))
        await syncer.sync_once()
        seen.append(elements(fake, "service-cidrs"))
        seen.append(set(fake.tables[(Family.IP6, "nftproxy")].elements["service-cidrs"]))
        syncer.changes.service_cidr_changed("extra", cidr("extra", "10.97.0.0/24"))
        await syncer.sync_once()
        seen.append(elements(fake, "service-cidrs"))
        syncer.changes.service_cidr_changed("kubernetes", None)  # deleted
        await syncer.sync_once()
        seen.append(elements(fake, "service-cidrs"))
        seen.append(elements(fake, "cluster-ips"))  # the Services are untouched
        return seen

    seen = asyncio.run(go())
    assert seen[0] == {("10.96.0.0/16",)}
    assert seen[1] == {("fd00:10:96::/112",)}
    assert seen[2] == {("10.96.0.0/16",), ("10.97.0.0/24",)}
    assert seen[3] == {("10.97.0.0/24",)}
    assert seen[4] == {("10.96.0.1",)}


def test_a_bad_or_too_wide_cidr_is_left_out_alone_and_reported() -> None:
    """kube-proxy v1.37 drops any width (a 0.0.0.0/0 ServiceCIDR cuts every new connection the node
    forwards or makes): such a CIDR is left out, and only it: the other family's one is used."""

    async def go() -> tuple[set[tuple[str, ...]], set[tuple[str, ...]], list[str]]:
        syncer, fake = make()
        syncer.changes.mark_loaded()
        syncer.changes.service_cidr_changed("kubernetes", cidr("kubernetes", "10.96.0.0/16"))
        syncer.changes.service_cidr_changed("bad", cidr("bad", "10.300.0.0/16", "fd00:10:97::/112"))
        syncer.changes.service_cidr_changed("everything", cidr("everything", "0.0.0.0/0"))
        syncer.changes.service_cidr_changed("wide-v6", cidr("wide-v6", "10.98.0.0/24", "2000::/12"))
        await syncer.sync_once()
        v6 = set(fake.tables[(Family.IP6, "nftproxy")].elements["service-cidrs"])
        return elements(fake, "service-cidrs"), v6, [str(x) for x in syncer.status.skipped]

    v4, v6, skipped = asyncio.run(go())
    assert v4 == {("10.96.0.0/16",), ("10.98.0.0/24",)}
    assert v6 == {("fd00:10:97::/112",)}
    assert skipped == [
        "ServiceCIDR bad: spec.cidrs[0]: invalid CIDR '10.300.0.0/16': left out (the rest of the ServiceCIDR is used)",
        "ServiceCIDR everything: spec.cidrs[0]: 0.0.0.0/0 is wider than /8: "
        "too wide to drop its unallocated addresses: left out (the rest of the ServiceCIDR is used)",
        "ServiceCIDR wide-v6: spec.cidrs[1]: 2000::/12 is wider than /16: "
        "too wide to drop its unallocated addresses: left out (the rest of the ServiceCIDR is used)",
    ]


def test_manifests_carry_service_cidrs_for_render_and_apply() -> None:
    inputs = classify([cidr("kubernetes", "10.96.0.0/16"), svc("a", "10.96.0.1")])
    assert [str(n) for c in inputs.service_cidrs for n in c.cidrs] == ["10.96.0.0/16"]
    assert not inputs.skipped
