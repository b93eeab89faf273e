"""loadBalancerSourceRanges of every shape on the real kernel, and with real packets.

Issue 19: a dual-stack LoadBalancer with ``["198.18.0.100/32", "fd00:198:18::100/128"]`` rendered
its IPv6 range as ``fd00:198:18::100/`` and the kernel refused every transaction of the node.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, bare_netns, cleanup_stale
from tests.support.run import nftproxy_argv, run_nftproxy

pytestmark = pytest.mark.netns

CFG = ProxyConfig(node_name="node1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),))
HTTP = [k.port(8080, "http")]


def dual_stack_lb(name: str, v4: str, v6: str, ranges: list[str], lb4: str, lb6: str) -> k.Obj:
    svc = k.service(
        name,
        [v4, v6],
        [k.port(80, "http", node_port=None)],
        type="LoadBalancer",
        lb_ips=[lb4, lb6],
        ipFamilies=["IPv4", "IPv6"],
        ipFamilyPolicy="RequireDualStack",
        loadBalancerSourceRanges=ranges,
    )
    return svc


def slices(name: str, v4: str, v6: str) -> list[k.Obj]:
    return [
        k.endpoint_slice(f"{name}-v4", name, [k.endpoint(v4, node="node1")], HTTP),
        k.endpoint_slice(f"{name}-v6", name, [k.endpoint(v6, node="node1")], HTTP, address_type="IPv6"),
    ]


def every_prefix_length() -> list[k.Obj]:
    """One dual-stack LoadBalancer per prefix length 0-128 (an IPv4 range too up to /32): one
    Service each, so that no two ranges collapse into one."""
    objs: list[k.Obj] = []
    for n in range(129):
        ranges = [f"fd00:198:18::100/{n}"] + ([f"198.18.0.100/{n}"] if n <= 32 else [])
        name = f"len-{n}"
        objs.append(
            dual_stack_lb(
                name, f"10.96.7.{n}", f"fd00:10:96::7:{n:x}", ranges, f"198.19.7.{n}", f"fd00:198:19::7:{n:x}"
            )
        )
        objs += slices(name, "10.244.1.2", "fd00:10:244:1::2")
    return objs


@pytest.fixture
def netns() -> Iterator[str]:
    with bare_netns("nsr") as name:
        yield name


def test_every_prefix_length_is_accepted_and_reads_back_as_compiled(netns: str) -> None:
    manifest = classify(every_prefix_length())
    backend = KernelBackend(netns)
    try:
        dp = Dataplane(backend, CFG)
        for svc in manifest.services:
            dp.inputs.set_service(svc)
        for sl in manifest.slices:
            dp.inputs.set_slice(sl)
        dp.sync()  # the kernel takes the whole table (it refused it before the fix)
        wanted = {
            f: {e.key for e in t.elements["firewall-allow"].values()} for f, t in zip(Family, dp.tables(), strict=True)
        }
        # one per range; and for /16 to /25, whose range holds the node's IP 198.18.0.1 but not
        # the LoadBalancer IP 198.19.7.N, that IP as a source too (allowFromNode; a wider range
        # holds it: one element, the kernel refuses overlapping ones)
        assert len(wanted[Family.IP]) == 33 + 10 and len(wanted[Family.IP6]) == 129
        for family in Family:
            back = backend.read(family, "nftproxy")
            assert back is not None
            # read back equal: no full sync sees a range as changed (deleted and added again)
            assert {e.key for e in back.elements["firewall-allow"].values()} == wanted[family]
        dp.forget()
        assert dp.sync().element_changes == 0
    finally:
        backend.close()


def test_render_output_passes_nft_check(netns: str, tmp_path: Path) -> None:
    """What a user runs: `nftproxy render` of the objects, checked by `nft -c`."""
    manifest = k.write(tmp_path / "objects.yaml", every_prefix_length())
    rendered = run_nftproxy("render", "-f", str(manifest), "--node-name", "node1", check=True).stdout
    assert "/ }" not in rendered and "/," not in rendered
    check = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "-c", "-f", "-"],
        input=rendered,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr[:2000]


@dataclass
class Lab:
    lab: NetLab
    node: Node
    pod: Pod
    allowed: Client  # 198.18.0.100, fd00:198:18::100
    refused: Client  # 198.18.0.101, fd00:198:18::101

    def answers(self, src: Client, dest: str, count: int = 3) -> set[str]:
        return {r.pod or str(r.error) for r in self.lab.probe(src, "tcp", dest, 80, count=count, timeout=0.7)}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale()
    with NetLab() as netlab:
        node = netlab.add_node("node1", 1)
        pod = netlab.add_pod(node, "a1", tcp=(8080,), udp=())
        t = Lab(netlab, node, pod, netlab.add_client("ext", 100, via=node), netlab.add_client("ext2", 101, via=node))
        objs = [
            # the Service of the issue
            dual_stack_lb(
                "fw", "10.96.3.17", "fd00:10:96::3:17", ["198.18.0.100/32", "fd00:198:18::100/128"],
                "198.19.3.17", "fd00:198:19::3:17",
            ),
            *slices("fw", pod.ipv4, pod.ipv6),
            # /0 on IPv4 (everyone); on IPv6 a /120 that holds neither client, and ext2's /128 twice
            dual_stack_lb(
                "wide", "10.96.3.18", "fd00:10:96::3:18",
                ["0.0.0.0/0", "fd00:198:18::/120", "fd00:198:18::101/128", "fd00:198:18::101/128"],
                "198.19.3.18", "fd00:198:19::3:18",
            ),
            *slices("wide", pod.ipv4, pod.ipv6),
        ]  # fmt: skip
        manifest = k.write(tmp_path_factory.mktemp("ranges") / "objects.yaml", objs)
        r = netlab.exec(
            node, *nftproxy_argv(), "apply", "-f", str(manifest), "--node-name", "node1",
            "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48", check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        yield t


@pytest.mark.parametrize("family", [4, 6])
def test_host_prefix_ranges_let_only_that_client_in(lab: Lab, family: int) -> None:
    dest = "198.19.3.17" if family == 4 else "fd00:198:19::3:17"
    assert lab.answers(lab.allowed, dest) == {"a1"}
    assert lab.answers(lab.refused, dest, count=2) == {"timeout"}  # dropped, as kube-proxy does


def test_slash_zero_a_wider_range_and_a_duplicate(lab: Lab) -> None:
    assert lab.answers(lab.allowed, "198.19.3.18") == {"a1"}  # 0.0.0.0/0: everyone
    assert lab.answers(lab.refused, "198.19.3.18") == {"a1"}
    # ::/120 is ::0-::ff: it holds neither ::100 nor ::101; ::101 is listed (twice) on its own
    assert lab.answers(lab.allowed, "fd00:198:19::3:18", count=2) == {"timeout"}
    assert lab.answers(lab.refused, "fd00:198:19::3:18") == {"a1"}
