"""--detect-local-mode on the real kernel with real connections: for each of kube-proxy's four
local-traffic detectors, which ClusterIP connections are masqueraded (the server sees the node's
address, not the client's), and which pods skip an externalTrafficPolicy Local.

node1 runs ``nftproxy apply`` of the objects with each mode's flags. Its pods: ``srv`` (the
ClusterIP's endpoint), ``here`` (routed on its own veth, as AWS VPC CNI's and Azure CNI's pods)
and ``bridged`` (its veth enslaved to the bridge cbr0, as a bridge CNI's pods); node2's pod
``there`` reaches node1's ClusterIP through node1 (node2 routes the Service range to it); ``ext``
is a client outside the cluster. The same packets through the compiled table:
tests/unit/test_detect_local.py; against kube-proxy: tests/conformance/test_detect_local.py.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nftproxy.cli.flags import add_proxy_flags, config_from_args
from nftproxy.compiler import names
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify
from nftproxy.model.parse import parse_node
from nftproxy.model.types import Node as NodeInfo
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from testkit.lab import netlab as nl
from testkit.lab.netlab import Client, NetLab, Pod, bare_netns, cleanup_stale
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

CLUSTER_IP, LB_IP = "10.96.5.10", "198.19.5.20"
FRONTEND = "ip daddr . meta l4proto . th dport"
MODES = {
    "ClusterCIDR": ["--cluster-cidr", "10.244.0.0/16"],
    "NodeCIDR": ["--detect-local-mode", "NodeCIDR"],
    "BridgeInterface": ["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "cbr0"],
    "InterfaceNamePrefix": ["--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "veth"],
}


@dataclass
class Lab:
    lab: NetLab
    node1: nl.Node
    srv: Pod
    here: Pod
    bridged: Pod
    there: Pod
    ext: Client
    manifest: Path
    objects: list[k.Obj]

    def apply(self, flags: list[str]) -> None:
        r = self.lab.exec(
            self.node1, *nftproxy_argv(), "apply", "-f", str(self.manifest), "--node-name", "node1", *flags,
            check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr

    def masqueraded(self, src: Pod | Client) -> bool:
        """One connection from ``src`` to the ClusterIP: did ``srv`` see another source?"""
        [r] = self.lab.probe(src, "tcp", CLUSTER_IP, 80, timeout=2.0)
        assert r.pod == "srv", r
        return r.peer != src.ipv4

    def lb_answer(self, src: Pod) -> str:
        """One connection to the Local-policy LB IP whose one endpoint is node2's pod."""
        [r] = self.lab.probe(src, "tcp", LB_IP, 80, timeout=0.7)
        return r.pod or str(r.error)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale()
    with NetLab() as netlab:
        node1, node2 = netlab.add_node("node1", 1), netlab.add_node("node2", 2)
        srv, here, bridged = (netlab.add_pod(node1, name, tcp=(8080,), udp=()) for name in ("srv", "here", "bridged"))
        there = netlab.add_pod(node2, "there", tcp=(8080,), udp=())
        ext = netlab.add_client("ext", 100, via=node1)
        netlab.bridge_pod(node1, bridged)
        netlab.ip(node2, "route replace 10.96.0.0/16 via 198.18.0.1 dev eth0")  # node2's pods: via node1
        netlab.ip(ext, "route add 10.96.0.0/16 via 198.18.0.1 dev eth0")
        objs = [
            k.node("node1", {"InternalIP": node1.ipv4}, pod_cidrs=(node1.pod_cidr4,)),
            *_services(srv.ipv4, there.ipv4, there_node="node2"),
        ]
        manifest = k.write(tmp_path_factory.mktemp("detect") / "objects.yaml", objs)
        yield Lab(netlab, node1, srv, here, bridged, there, ext, manifest, objs)


# mode: is a ClusterIP connection masqueraded from here, bridged, there, ext; which pod answers
# here and bridged at the Local-policy LB IP (its endpoint on node2: a local pod skips the policy,
# any other source is dropped)
EXPECTED = {
    "ClusterCIDR": ((False, False, False, True), ("there", "there")),
    "NodeCIDR": ((False, False, True, True), ("there", "there")),
    "BridgeInterface": ((True, False, True, True), ("timeout", "there")),
    "InterfaceNamePrefix": ((False, True, True, True), ("there", "timeout")),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_each_mode_masquerades_and_short_circuits_what_it_tells_apart(lab: Lab, mode: str) -> None:
    lab.apply(MODES[mode])
    masq, lb = EXPECTED[mode]
    seen = tuple(lab.masqueraded(src) for src in (lab.here, lab.bridged, lab.there, lab.ext))
    assert seen == masq
    assert (lab.lb_answer(lab.here), lab.lb_answer(lab.bridged)) == lb


def test_node_cidr_without_pod_cidrs_masquerades_nothing_from_outside(lab: Lab, tmp_path: Path) -> None:
    """kube-proxy's no-op detector, until the Node has a podCIDR: nothing is local, and nothing is
    masqueraded for being non-local."""
    objs = [o for o in lab.objects if o["kind"] != "Node"]
    objs.append(k.node("node1", {"InternalIP": lab.node1.ipv4}))
    manifest = k.write(tmp_path / "objects.yaml", objs)
    r = lab.lab.exec(
        lab.node1, *nftproxy_argv(), "apply", "-f", str(manifest), "--node-name", "node1", *MODES["NodeCIDR"],
        check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert not lab.masqueraded(lab.ext)
    assert not lab.masqueraded(lab.there)
    assert lab.lb_answer(lab.here) == "timeout"


@pytest.mark.parametrize("mode", list(MODES))
def test_the_kernel_lists_each_modes_rules_back_as_compiled(mode: str) -> None:
    """The kernel lists the detector's rules as compiled (``iifname "veth*"`` as written: what
    an operator reads with nft, what `nftproxy explain` reads back), holds the pod sources' set,
    and a full sync over the table changes nothing."""
    p = argparse.ArgumentParser()
    add_proxy_flags(p)
    config = config_from_args(p.parse_args(["--node-name", "node1", "--node-ip", "198.18.0.1", *MODES[mode]]))
    node = parse_node(k.node("node1", {"InternalIP": "198.18.0.1"}, pod_cidrs=("10.244.1.0/24",)))
    assert isinstance(node, NodeInfo)
    config = config.for_node(node)
    manifest = classify(_services("10.244.1.2", "10.244.1.3", there_node="node1"))
    with bare_netns("ndl") as netns:
        backend = KernelBackend(netns)
        try:
            dp = Dataplane(backend, config)
            for svc in manifest.services:
                dp.inputs.set_service(svc)
            for sl in manifest.slices:
                dp.inputs.set_slice(sl)
            dp.sync()
            [want] = [t for t in dp.tables() if t.family is Family.IP]
            detector = config.local_detector(4)
            assert detector is not None
            for chain, rule in (
                ("cluster-1", f"{detector.not_local} jump mark-for-masquerade"),
                (
                    "external-local-1",
                    f"{detector.local} ip daddr . meta l4proto . th dport vmap @local-policy-short-circuit",
                ),
                ("nodeport-local-1", f"{detector.local} meta l4proto . th dport vmap @nodeport-short-circuit"),
            ):
                assert rule in want.chains[chain].rules
                listed = subprocess.run(
                    ["ip", "netns", "exec", netns, "nft", "list", "chain", "ip", "nftproxy", chain],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                assert rule in [line.strip() for line in listed.splitlines()], listed
            back = backend.read(Family.IP, "nftproxy")
            assert back is not None
            assert {n: set(back.elements.get(n, {})) for n in names.POD_SOURCE_SETS if n in want.sets} == {
                n: set(want.elements[n]) for n in names.POD_SOURCE_SETS if n in want.sets
            }
            dp.forget()
            assert dp.sync().element_changes == 0
        finally:
            backend.close()


def _services(web_pod: str, lb_pod: str, there_node: str) -> list[k.Obj]:
    """The ClusterIP Service "web" (its endpoint on node1) and the Local-policy LoadBalancer
    "lb-local" (its endpoint on ``there_node``)."""
    http = [k.port(8080, "http")]
    return [
        k.service("web", [CLUSTER_IP], [k.port(80, "http")]),
        k.endpoint_slice("web", "web", [k.endpoint(web_pod, node="node1")], http),
        k.service(
            "lb-local",
            ["10.96.5.20"],
            [k.port(80, "http", node_port=30520)],
            type="LoadBalancer",
            lb_ips=[LB_IP],
            externalTrafficPolicy="Local",
            healthCheckNodePort=32520,
        ),
        k.endpoint_slice("lb-local", "lb-local", [k.endpoint(lb_pod, node=there_node)], http),
    ]
