"""The convergence checker's comparison (pure), against what the fake backend holds after syncs."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_network

import pytest

from nftproxy.compiler import compile_tables
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose.verify import check, compare, equal_contents, expected, read_kernel
from nftproxy.model.parse import parse_endpoint_slice, parse_service
from nftproxy.model.types import Service, Skipped
from nftproxy.nft.backend import NftError
from nftproxy.nft.fake import FakeBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.builders import CFG, eps, svc


def programmed(services: list[Service], n: int = 3) -> tuple[Dataplane, FakeBackend]:
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    for s in services:
        dp.inputs.set_service(s)
        i = int(s.name[1:])
        dp.inputs.set_slice(eps(i, n))
    dp.sync()
    return dp, fake


def diffs(dp: Dataplane, fake: FakeBackend) -> list[str]:
    desired = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), dp.config)
    return [str(d) for d in compare(desired.tables, read_kernel(fake, "nftproxy"))]


def test_in_sync_has_no_difference() -> None:
    dp, fake = programmed([svc(i, node_port=i % 2 == 0, external=i == 3) for i in range(6)])
    assert diffs(dp, fake) == []
    desired = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), CFG)
    applied = read_kernel(fake, "nftproxy")
    assert all(equal_contents(t, applied[t.family]) for t in desired.tables)


def test_service_missing_from_the_kernel() -> None:
    dp, fake = programmed([svc(1), svc(2)])
    t = fake.tables[(Family.IP, "nftproxy")]
    del t.elements["service-ips"][("10.96.0.2", "tcp", "80")]
    assert diffs(dp, fake) == [
        "Service default/s1:p missing: 10.96.0.2 tcp 80 is not in the kernel (want goto cluster-3); "
        "the kernel has stale elements for it: endpoints [10.244.1.1:8080, 10.244.1.2:8080, 10.244.1.3:8080]"
    ]


def test_extra_service_in_the_kernel() -> None:
    dp, fake = programmed([svc(1), svc(2)])
    dp.inputs.delete_service("default/s2")  # the API no longer has it; the kernel still does
    dp.inputs.delete_slice("default/s2-x")
    out = diffs(dp, fake)
    assert "Service default/s2:p extra: 10.96.0.3 tcp 80 is in the kernel (goto cluster-3), not in the API" in out
    assert "Service default/s2 extra: ClusterIP 10.96.0.3 in cluster-ips, not in the API" in out
    assert all("s1" not in line for line in out), out


def test_wrong_endpoints() -> None:
    dp, fake = programmed([svc(1)], n=3)
    dp.inputs.set_slice(eps(1, 5))  # the API has 5 endpoints (4 ready), the kernel 3
    out = diffs(dp, fake)
    assert any(
        line.startswith("Service default/s1:p wrong endpoints on 10.96.0.2 tcp 80 (endpoints): kernel 3")
        and "missing 10.244.1.5:8080" in line
        for line in out
    ), out


def test_stale_policy() -> None:
    dp, fake = programmed([svc(1)])
    dp.inputs.set_service(replace(svc(1), internal_traffic_policy="Local"))
    out = diffs(dp, fake)
    assert any(
        "Service default/s1:p stale policy on 10.96.0.2 tcp 80: kernel service-ips goto cluster-3, "
        "want service-ips goto cluster-local-1" in line
        for line in out
    ), out


def test_missing_table_and_other_config() -> None:
    dp, fake = programmed([svc(1)])
    desired = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), CFG)
    assert next(str(d) for d in compare(desired.tables, {})).startswith("table ip nftproxy missing from the kernel")
    other = replace(CFG, cluster_cidrs=(ip_network("10.0.0.0/8"),))
    tables = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), other).tables
    out = [str(d) for d in compare(tables, read_kernel(fake, "nftproxy"))]
    assert any("cluster CIDRs (--cluster-cidr) differ: kernel {10.244.0.0/16}, want {10.0.0.0/8}" in x for x in out), (
        out
    )


def test_invalid_api_object_is_a_note_not_a_difference() -> None:
    good = k.service("web", ["10.96.0.50"], [k.port(80, "http")])
    slice_ = k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.9")], [k.port(8080, "http")])
    parsed = parse_service(good)
    assert isinstance(parsed, Service)
    fake = FakeBackend()
    dp = Dataplane(fake, CFG)
    dp.inputs.set_service(parsed)
    s = parse_endpoint_slice(slice_)
    assert not isinstance(s, Skipped)
    dp.inputs.set_slice(s)  # type: ignore[arg-type]
    dp.sync()
    bad = k.service("web", ["10.96.0.50"], [k.port(0, "http")])  # now invalid in the API
    desired, tainted = expected([bad], [slice_], None, CFG)
    report = check(desired, read_kernel(fake, "nftproxy"), tainted)
    assert report.differences == ()
    assert any("Service default/web:http extra" in n and "port 0 is not in 1-65535" in n for n in report.notes)


def test_a_refused_sync_keeps_the_previous_table_and_the_checker_says_what_is_pending() -> None:
    dp, fake = programmed([svc(1)], n=2)
    dp.inputs.set_slice(eps(1, 3))
    fake.fail_next = "Error: Could not process rule: No space left on device"
    with pytest.raises(NftError, match="No space left on device"):
        dp.sync()
    out = diffs(dp, fake)  # the kernel still holds the 2-endpoint table: the third is pending
    assert any("wrong endpoints on 10.96.0.2 tcp 80" in x and "missing 10.244.1.3:8080" in x for x in out), out
    assert dp.sync().full  # the retry compares with the kernel's whole table
    assert diffs(dp, fake) == []


def test_endpoint_drift_of_source_hash_and_round_robin_services_is_attributed() -> None:
    """Their endpoint maps are named `endpoints-sh-N` and `rr-<tag>-N` (keyed by slot only)."""
    for algorithm, endpoint_map in (("source-hash", "endpoints-sh-3"), ("round-robin", "rr-")):
        fake = FakeBackend()
        dp = Dataplane(fake, replace(CFG, load_balancing=algorithm))
        for i in (1, 2):
            dp.inputs.set_service(svc(i))
            dp.inputs.set_slice(eps(i, 3))
        dp.sync()
        elements = fake.tables[(Family.IP, "nftproxy")].elements
        name = next(n for n in elements if n.startswith(endpoint_map) and elements[n])
        key = next(iter(elements[name]))
        del elements[name][key]
        desired = compile_tables(dp.inputs.services.values(), dp.inputs.slices.values(), dp.config)
        found = compare(desired.tables, read_kernel(fake, "nftproxy"))
        assert found and all(d.service is not None and d.service.startswith("default/s") for d in found), [
            (str(d), d.service) for d in found
        ]
