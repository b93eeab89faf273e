"""The quarantine on the real kernel (issue 19): one Service of 1,000 whose elements the kernel
refuses is found by dry runs and left out; the other 999 are programmed in the same sync, their
changes keep flowing, and fixing the bad one's object brings it back."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from ipaddress import ip_address, ip_network
from typing import Any, cast

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.nft.kernel import KernelBackend
from testkit.lab.netlab import bare_netns
from tests.support.poison import BAD_ADDRESS, POISON_PORT, feed, objects, poisoned

pytestmark = pytest.mark.netns

CFG = ProxyConfig(node_name="n1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),))
BAD = 500


def kernel_set(netns: str, name: str) -> list[object]:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-j", "list", "map" if name == "service-ips" else "set", "ip", "nftproxy",
         name],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for item in json.loads(out)["nftables"]:
        body = item.get("set") or item.get("map")
        if body:
            return list(body.get("elem", []))
    raise AssertionError(f"no {name} in the kernel")


def service_ip_verdict(netns: str, ip: str) -> str | None:
    for elem in kernel_set(netns, "service-ips"):
        key, verdict = cast(list[dict[str, Any]], elem)
        val = key["elem"]["val"] if "elem" in key else key
        if val["concat"][0] == ip:
            return str(verdict["goto"]["target"])
    return None


@pytest.fixture
def netns(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr("nftproxy.dataplane.sync.compile_fragment", poisoned())
    with bare_netns("nrf") as name:
        yield name


def test_one_refused_service_of_1000_on_the_real_kernel(netns: str) -> None:
    backend = KernelBackend(netns)
    try:
        dp = Dataplane(backend, CFG)
        feed(dp, [o for i in range(1000) for o in objects(i, port=POISON_PORT if i == BAD else 80)])
        start = time.perf_counter()
        result = dp.sync()  # the first load is refused, the guilty one found, the rest loaded
        print(f"quarantine sync of 1,000 Services x 10: {time.perf_counter() - start:.2f} s")
        assert result.full

        cluster_ips = kernel_set(netns, "cluster-ips")
        assert len(cluster_ips) == 999
        assert "10.96.2.1" not in cluster_ips  # svc-0500
        assert service_ip_verdict(netns, "10.96.0.8") == "cluster-10"
        (skip,) = dp.stats()[2]
        # named, with the statement the kernel refused (nft takes the bad address for a host name)
        assert str(skip) == (
            "Service default/svc-0500: the kernel refused its IPv4 rules: Error: Could not resolve hostname: "
            f"Name or service not known [add element ip nftproxy cluster-ips {{ {BAD_ADDRESS} }}]"
        )

        feed(dp, objects(7, endpoints=3))  # another Service's change: a partial sync, taken
        assert not dp.sync().full
        assert service_ip_verdict(netns, "10.96.0.8") == "cluster-3"

        feed(dp, objects(BAD, port=80))  # the fix
        dp.sync()
        assert "10.96.2.1" in kernel_set(netns, "cluster-ips")
        assert service_ip_verdict(netns, "10.96.2.1") == "cluster-10"
        assert dp.stats()[2] == []
    finally:
        backend.close()
