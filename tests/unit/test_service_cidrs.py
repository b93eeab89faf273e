"""ServiceCIDRs (networking.k8s.io/v1): their unallocated addresses are dropped, as kube-proxy's
``daddr { serviceCIDRs } drop``; a change is applied at the next sync (kube-proxy waits for its
hourly full sync: tests/conformance/differences.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from nftproxy.model.manifests import classify
from nftproxy.nft.objects import Family
from tests.support.syncer import elements, make, svc


def cidr(name: str, *cidrs: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": name},
        "spec": {"cidrs": list(cidrs)},
    }


def test_service_cidrs_change_the_drop_set_at_the_next_sync() -> None:
    async def go() -> list[set[tuple[str, ...]]]:
        syncer, fake = make()
        syncer.mark_loaded()
        seen = []
        syncer.service_changed("default/a", svc("a", "10.96.0.1"))
        syncer.service_cidr_changed("kubernetes", cidr("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"))
        await syncer.sync_once()
        seen.append(elements(fake, "service-cidrs"))
        seen.append(set(fake.tables[(Family.IP6, "nftproxy")].elements["service-cidrs"]))
        syncer.service_cidr_changed("extra", cidr("extra", "10.97.0.0/24"))
        await syncer.sync_once()
        seen.append(elements(fake, "service-cidrs"))
        syncer.service_cidr_changed("kubernetes", None)  # deleted
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


def test_a_bad_service_cidr_is_skipped_and_changes_nothing() -> None:
    async def go() -> set[tuple[str, ...]]:
        syncer, fake = make()
        syncer.mark_loaded()
        syncer.service_cidr_changed("kubernetes", cidr("kubernetes", "10.96.0.0/16"))
        syncer.service_cidr_changed("bad", cidr("bad", "10.300.0.0/16"))
        syncer.service_cidr_changed("everything", cidr("everything", "0.0.0.0/0"))  # would drop all traffic
        syncer.service_cidr_changed("everything6", cidr("everything6", "::/0"))
        await syncer.sync_once()
        return elements(fake, "service-cidrs")

    assert asyncio.run(go()) == {("10.96.0.0/16",)}


def test_manifests_carry_service_cidrs_for_render_and_apply() -> None:
    inputs = classify([cidr("kubernetes", "10.96.0.0/16"), svc("a", "10.96.0.1")])
    assert [str(n) for c in inputs.service_cidrs for n in c.cidrs] == ["10.96.0.0/16"]
    assert not inputs.skipped
