"""The legacy address spellings, as the oldest apiserver we support (v1.35.4, StrictIPCIDRValidation
off by default) stores them: leading zeros (decimal), IPv4-mapped IPv6, padded source ranges; and a
ServiceCIDR with one CIDR too wide to drop. `nftproxy run` against that apiserver serves them as
kube-proxy reads them, with real connections in a node namespace (tests/conformance compares the
same spellings with kube-proxy v1.37.2 itself, on an apiserver with that gate off)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.controlplanes import OLDEST, oldest_apiserver, started_control_plane

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

NS = "spellings"
CLUSTER_IP, CLUSTER_IP_TEXT = "10.96.7.10", "010.096.007.010"
EXT_IPS = {"198.19.7.10": "198.019.007.010", "198.19.7.11": "::ffff:198.19.7.11"}  # address: as stored
LB_IPS = {"198.19.8.10": "198.019.008.010", "198.19.8.11": "::ffff:198.19.8.11"}


@dataclass
class Env:
    cp: ControlPlane
    cl: LocalCluster
    node: Node
    pods: list[Pod]
    ext1: Client  # allowed by the source range
    ext2: Client  # not

    def probe(self, src: Node | Pod | Client, dest: str, port: int, count: int = 1) -> set[str]:
        return {r.pod or str(r.error) for r in self.cl.lab.probe(src, "tcp", dest, port, count=count, timeout=1.0)}


@pytest.fixture(scope="module")
def oldest() -> Iterator[ControlPlane]:
    yield from started_control_plane(apiserver_bin=oldest_apiserver())


@pytest.fixture(scope="module")
def env(oldest: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cp = oldest
    version = json.loads(cp.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert version == OLDEST, version
    cleanup_stale()
    with NetLab() as lab:
        cl = LocalCluster(cp, lab, tmp_path_factory.mktemp("spellings"))
        try:
            node = cl.add_node("old-node", 1)
            pods = [lab.add_pod(node, f"p{i}", tcp=(8080,)) for i in range(2)]
            ext1, ext2 = lab.add_client("ext1", 100, via=node), lab.add_client("ext2", 101, via=node)
            cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "0.5s")
            eventually(lambda: cl.proxy_status(node).get("status", {}).get("syncs"), what="first sync")
            yield Env(cp, cl, node, pods, ext1, ext2)
        finally:
            log = cl.proxy_log(node) if cl.proxies else ""
            cl.close()
            assert "Traceback" not in log, log[-5000:]


def _created(env: Env, obj: k.Obj) -> k.Obj:
    """Created as the API stores it; the stored object (the apiserver warns, and keeps the text)."""
    r = env.cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
    assert "non-standard" in r.stderr, r.stderr  # the apiserver's own warning: it is a legacy spelling
    return dict(json.loads(r.stdout))


def test_the_oldest_apiserver_stores_legacy_spellings_and_they_are_served_as_kube_proxy_reads_them(env: Env) -> None:
    env.cl.namespace(NS)
    svc = k.service(
        "legacy",
        [CLUSTER_IP_TEXT],
        [k.port(80, "http", target=8080)],
        namespace=NS,
        type="LoadBalancer",
        external_ips=list(EXT_IPS.values()),
        # ext1 alone, in three spellings (decimal zeros, a padded one, IPv4-mapped)
        loadBalancerSourceRanges=["198.018.000.100/032", " 198.18.0.100/32 ", "::ffff:198.18.0.100/128"],
    )
    stored = _created(env, svc)
    assert stored["spec"]["clusterIPs"] == [CLUSTER_IP_TEXT] and stored["spec"]["ipFamilies"] == ["IPv4"]
    assert stored["spec"]["externalIPs"] == list(EXT_IPS.values())
    ingress = {"status": {"loadBalancer": {"ingress": [{"ip": t} for t in LB_IPS.values()]}}}
    env.cp.kubectl(
        "patch", "service", "legacy", "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps(ingress)
    )
    a, b = env.pods
    sl = k.endpoint_slice(
        "legacy-1",
        "legacy",
        [k.endpoint(a.ipv4.replace("10.244.", "010.244."), node=env.node.name), k.endpoint(f"::ffff:{b.ipv4}")],
        [k.port(8080, "http")],
        namespace=NS,
    )
    assert [e["addresses"] for e in _created(env, sl)["endpoints"]][1] == [f"::ffff:{b.ipv4}"]

    both = {"p0", "p1"}
    eventually(lambda: env.probe(env.node, CLUSTER_IP, 80, 12) == both, what="the ClusterIP from the node")
    eventually(lambda: env.probe(a, CLUSTER_IP, 80, 12) == both, what="the ClusterIP from a pod")
    for ip in EXT_IPS:
        assert env.probe(env.ext2, ip, 80, 12) == both, ip  # externalIPs: no source ranges
    for ip in LB_IPS:
        assert env.probe(env.ext1, ip, 80, 12) == both, ip
        assert env.probe(env.ext2, ip, 80, 2) == {"timeout"}, ip  # dropped: not in the ranges
    status = env.cl.proxy_status(env.node)["status"]
    assert not [s for s in status.get("skipped", []) if s["namespace"] == NS], status["skipped"]


def test_a_bad_node_address_and_a_too_wide_service_cidr_are_left_out_alone_and_reported(env: Env) -> None:
    """The API does not validate a Node's addresses: a bad one is left out (kube-proxy's
    GetNodeHostIPs skips it), the Node is used. A ServiceCIDR with a CIDR too wide to drop keeps its
    other CIDR (kube-proxy v1.37 drops the wide one too: README, Differences)."""
    node = env.node
    addresses = [
        {"type": "InternalIP", "address": node.ipv4.replace("198.18.0.", "198.018.000.00")},
        {"type": "InternalIP", "address": node.ipv6},
        {"type": "ExternalIP", "address": "not-an-ip"},
        {"type": "Hostname", "address": node.name},
    ]
    env.cp.kubectl(
        "patch", "node", node.name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"addresses": addresses}}),
    )  # fmt: skip
    env.cl.apply(k.service_cidr("legacy-wide", "10.98.0.0/24", "2000::/12"))

    def reported() -> list[str] | None:
        skipped = env.cl.proxy_status(node).get("status", {}).get("skipped", [])
        mine = sorted(f"{s['kind']} {s['name']}: {s['reason']}" for s in skipped if not s["namespace"])
        return mine if len(mine) == 2 else None

    assert eventually(reported, what="the Node and the ServiceCIDR reported") == [
        f"Node {node.name}: status.addresses[2]: invalid ExternalIP 'not-an-ip': "
        "left out (the rest of the Node is used)",
        "ServiceCIDR legacy-wide: spec.cidrs[1]: 2000::/12 is wider than /16: too wide to drop its unallocated "
        "addresses: left out (the rest of the ServiceCIDR is used)",
    ]

    def drop_set() -> str | None:
        out = subprocess.run(
            ["ip", "netns", "exec", node.netns, "nft", "list", "set", "ip", "nftproxy", "service-cidrs"],
            capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip
        return out if "10.98.0.0/24" in out else None

    eventually(drop_set, what="the narrow CIDR's unallocated addresses dropped")
    # routed to ext1, which answers every address of it (refused) unless the node drops the packet
    env.cl.lab.ip(node, f"route add 10.98.0.0/23 via {env.ext1.ipv4}")
    env.cl.lab.ip(env.ext1, "route add local 10.98.0.0/23 dev lo", f"route add 10.244.1.0/24 via {node.ipv4}")
    assert env.probe(env.pods[0], "10.98.0.200", 80, 1) == {"timeout"}  # dropped at the node
    assert env.probe(env.pods[0], "10.98.1.200", 80, 1) == {"refused"}  # outside the CIDR: ext1 answers
    events = env.cl.proxy_events("default")  # a cluster-scoped object's Events
    kinds = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events}
    assert {("Node", node.name), ("ServiceCIDR", "legacy-wide")} <= kinds, events
