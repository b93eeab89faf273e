"""--detect-local-mode against kube-proxy: for each of its four local-traffic detectors, a fresh
pair of labs, kube-proxy started with the mode's KubeProxyConfiguration fields and nftproxy with
the flags of the same dict (tests/support/detect_local.py: one file configures both), and the same
real connections in both: which ClusterIP connections are masqueraded, and which pods skip an
externalTrafficPolicy Local (rows in the suite's MATCH/DIFF table).

The labs (both built alike): node-1's pods ``srv`` (the ClusterIP's endpoint), ``here`` (routed
on its own veth) and ``bridged`` (its veth a port of the bridge cbr0); node-2's pod ``there``,
whose ClusterIP traffic node-2 routes through node-1; ``ext``, a client outside the cluster
routing the Service range to node-1. The suite's shared labs run one proxy pair with one config,
hence labs of their own here; IPv4 only, to keep the run short.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testkit.k8s import objects as k
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import EXTERNAL4, Host, NetLab, cleanup_stale
from tests.conformance import cases as c
from tests.conformance.harness import (
    CRD,
    REPORT,
    KubeProxyRef,
    NftProxy,
    Row,
    Side,
    compare_probe,
    node_objects,
    parallel,
    settle,
)
from tests.support.detect_local import MODES, nftproxy_flags

pytestmark = [pytest.mark.conformance, pytest.mark.k8s, pytest.mark.netns]

CLUSTER_IP, LB_IP = "10.96.40.10", "198.19.40.20"
SOURCES = ("here", "bridged", "there", "ext")


def build(lab: NetLab) -> dict[str, Host]:
    n1, n2 = lab.add_node(c.NODE, 1), lab.add_node(c.OTHER, 2)
    srv, here, bridged = (lab.add_pod(n1, name, tcp=(8080,), udp=()) for name in ("srv", "here", "bridged"))
    there = lab.add_pod(n2, "there", tcp=(8080,), udp=())
    ext = lab.add_client("ext", 100, via=n1)
    lab.bridge_pod(n1, bridged)
    lab.ip(n2, f"route replace 10.96.0.0/16 via {n1.ipv4} dev eth0")  # node-2's pods: via node-1
    lab.ip(ext, f"route add 10.96.0.0/16 via {n1.ipv4} dev eth0")
    # a real node has a default route: LB IPs it does not DNAT go to a router (ext, which does not
    # forward) instead of failing routing, so a proxy's filter drop is seen as such (a timeout)
    lab.ip(n1, f"route add {EXTERNAL4} via {ext.ipv4} dev eth0")
    return {"node": n1, "srv": srv, "here": here, "bridged": bridged, "there": there, "ext": ext}


def objects(hosts: dict[str, Host]) -> list[k.Obj]:
    http = [k.port(8080, "http")]
    web = k.service("detect-web", [CLUSTER_IP], [k.port(80, "http")], namespace=c.NS)
    lb = k.service(
        "detect-lb-local", ["10.96.40.20"], [k.port(80, "http", node_port=30840)], namespace=c.NS,
        type="LoadBalancer", lb_ips=[LB_IP], externalTrafficPolicy="Local", healthCheckNodePort=32540,
    )  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": c.NS}},
        *node_objects(),  # node-1's podCIDRs: 10.244.1.0/24, fd00:10:244:1::/64 (NodeCIDR)
        web,
        k.endpoint_slice(
            "detect-web", "detect-web", [k.endpoint(hosts["srv"].ipv4, node=c.NODE)], http, namespace=c.NS
        ),
        lb,
        k.endpoint_slice(
            "detect-lb-local", "detect-lb-local", [k.endpoint(hosts["there"].ipv4, node=c.OTHER)], http, namespace=c.NS
        ),
    ]


def probes() -> list[c.Probe]:
    out = [c.Probe(src, "tcp", CLUSTER_IP, 80, "ClusterIP") for src in SOURCES]
    out += [c.Probe(src, "tcp", LB_IP, 80, "LB (eTP Local, endpoint on node-2)") for src in ("here", "bridged")]
    return out


@dataclass
class Env:
    cp: ControlPlane
    workdir: Path


@pytest.fixture(scope="module")
def env(conformance_control_plane: ControlPlane) -> Iterator[Env]:
    cp = conformance_control_plane
    workdir = Path(tempfile.mkdtemp(prefix="kd-conformance-"))
    try:
        cp.kubectl("apply", "-f", str(CRD))
        cp.kubectl("wait", "--for=condition=Established", "crd/proxystatuses.nftproxy.io", "--timeout=30s")
        cp.wait_default_service_cidr()
        yield Env(cp, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _apply(cp: ControlPlane, objs: list[k.Obj]) -> None:
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs), timeout=120)
    [lb] = [o for o in objs if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer"]
    meta = lb["metadata"]  # its ingress IP: status is a subresource, which apply leaves alone
    cp.kubectl(
        "patch", "service", meta["name"], "-n", meta["namespace"], "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}}),
    )  # fmt: skip


@pytest.mark.parametrize("mode", list(MODES))
def test_each_local_traffic_detector_answers_as_kube_proxys(env: Env, mode: str) -> None:
    if (only := os.environ.get("NFTPROXY_CONFORMANCE_ONLY")) and not re.search(only, f"detect-local-{mode}"):
        pytest.skip("not selected (NFTPROXY_CONFORMANCE_ONLY)")
    cleanup_stale("kd")
    config = MODES[mode]
    work = env.workdir / mode
    with NetLab("kd") as lab_a, NetLab("kd") as lab_b:
        a, b = Side("kube-proxy", lab_a, build(lab_a)), Side("nftproxy", lab_b, build(lab_b))
        assert {n: h.ipv4 for n, h in a.hosts.items()} == {n: h.ipv4 for n, h in b.hosts.items()}
        _apply(env.cp, objects(a.hosts))
        (work / "a").mkdir(parents=True)
        (work / "b").mkdir()
        a.proxy = KubeProxyRef(a, env.cp, work / "a", local_config=config)
        b.proxy = NftProxy(b, env.cp, work / "b", local_flags=nftproxy_flags(config))
        try:
            since = time.time()
            a.proxy.start()
            b.proxy.start()
            settle((a, b), since, quiet=1.5)
            jobs = probes()
            results = parallel(lambda p: compare_probe(a, b, p), jobs, workers=6)
            rows = [
                REPORT.add(f"detect-local-{mode}", p.path(), kp, np) for p, (kp, np) in zip(jobs, results, strict=True)
            ]
            rulesets = {s.title: _ruleset(s) for s in (a, b)}
        finally:
            for s in (a, b):
                if s.proxy is not None:
                    s.proxy.stop()
    _check(rows, rulesets)


def _ruleset(side: Side) -> str:
    r = subprocess.run(
        ["ip", "netns", "exec", side.node.netns, "nft", "list", "ruleset"], capture_output=True, text=True, check=False
    )
    return r.stdout


def _check(rows: list[Row], rulesets: dict[str, str]) -> None:
    bad = REPORT.unexpected(rows)
    assert not bad, (
        "kube-proxy and nftproxy differ:\n"
        + "\n".join(f"{r.case} | {r.path} | {r.kube_proxy} | {r.nftproxy}" for r in bad)
        + "".join(f"\n--- {title}:\n{text}" for title, text in rulesets.items())
    )
