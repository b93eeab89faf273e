"""`nftproxy run --config FILE` against a real kube-apiserver, in a node namespace: kube-proxy's
KubeProxyConfiguration (kubeadm's, with a few settings changed) is what runs. Its masquerade bit
is the mark in the kernel's table, its JSON logging is what the log holds (the version, then the
effective configuration, once each), /configz serves that configuration, and a Service answers.
A change of the file stops the proxy (to start again with it), as kube-proxy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from nftproxy import __version__
from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.k8s.kubeproxy import http_get_in
from testkit.lab.netlab import NetLab, Node, cleanup_stale

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

NS = "kpconf"
KUBEADM = Path(__file__).resolve().parents[1] / "golden" / "kube-proxy" / "kubeadm-config.conf"


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    config: Path


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale()
    work = tmp_path_factory.mktemp("kpconf")
    config: dict[str, Any] = yaml.safe_load(KUBEADM.read_text())
    config["mode"] = "nftables"
    config["nftables"]["masqueradeBit"] = 3
    config["nftables"]["minSyncPeriod"] = "100ms"
    config["logging"]["format"] = "json"
    config["clientConnection"]["kubeconfig"] = ""  # the flag start_proxy gives wins anyway
    path = work / "config.conf"
    path.write_text(yaml.safe_dump(config))
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, work)
        try:
            node = cl.add_node("kpconf-node", 1)
            pod = lab.add_pod(node, "p0", tcp=(8080,), udp=())
            cl.namespace(NS)
            eps = [k.endpoint(pod.ipv4, node="kpconf-node")]
            cl.apply(
                k.service("web", ["10.96.7.10"], [k.port(80, "http")], namespace=NS),
                k.endpoint_slice("web-abc", "web", eps, [k.port(8080, "http")], namespace=NS),
            )
            cl.start_proxy(node, "--config", str(path), "--status-period", "0.5s")
            yield Env(cl, node, path)
        finally:
            log = cl.proxy_log(node) if cl.proxies else ""
            cl.close()
            if log and "Traceback" in log:
                print(log[-5000:])


def test_the_service_answers_and_the_table_marks_with_the_files_bit(env: Env) -> None:
    lab = env.cl.lab
    got = eventually(
        lambda: {r.pod for r in lab.probe(env.node, "tcp", "10.96.7.10", 80, count=2, timeout=1.0)} == {"p0"},
        timeout=30, what="the Service answers",
    )  # fmt: skip
    assert got
    table = lab.exec(env.node, "nft", "list", "table", "ip", "nftproxy").stdout
    assert "meta mark set meta mark | 0x00000008" in table
    assert "0x00004000" not in table


def test_the_log_is_json_with_the_version_and_the_effective_configuration_once(env: Env) -> None:
    def records() -> list[dict[str, Any]] | None:
        lines = [x for x in env.cl.proxy_log(env.node).splitlines() if x.strip()]
        out = [json.loads(x) for x in lines]  # every line one JSON object
        return out if any(r["msg"].startswith("configuration: ") for r in out) else None

    logged = eventually(records, timeout=30, what="the configuration logged")
    assert all(set(r) >= {"ts", "level", "logger", "msg"} for r in logged)
    assert [r["msg"] for r in logged].count(f"nftproxy version {__version__}") == 1
    (line,) = [r["msg"] for r in logged if r["msg"].startswith("configuration: ")]
    config = json.loads(line.removeprefix("configuration: "))
    assert (config["kind"], config["mode"], config["nftables"]["masqueradeBit"]) == (
        "KubeProxyConfiguration",
        "nftables",
        3,
    )
    assert config["nftables"]["minSyncPeriod"] == "100ms" and config["logging"]["format"] == "json"
    # the flags start_proxy gives won over the file (the test's pod CIDRs, the node's addresses)
    assert config["clusterCIDR"] == "10.244.0.0/16,fd00:10:244::/48"
    assert config["metricsBindAddress"] == f"{env.node.ipv4}:10249"


def test_configz_serves_the_effective_configuration(env: Env) -> None:
    status, body = http_get_in(env.node.netns, env.node.ipv4, 10249, "/configz")
    assert status == 200
    config = json.loads(body)["kubeproxy.config.k8s.io"]
    assert config["apiVersion"] == "kubeproxy.config.k8s.io/v1alpha1"
    assert config["nftables"]["masqueradeBit"] == 3 and config["hostnameOverride"] == "kpconf-node"


def test_a_changed_file_stops_the_proxy_and_its_rules_stay(env: Env) -> None:
    """Last: it stops the proxy."""
    proc = env.cl.proxies[env.node.name]
    config = yaml.safe_load(env.config.read_text())
    config["nftables"]["syncPeriod"] = "1m"
    env.config.write_text(yaml.safe_dump(config))
    assert proc.wait(timeout=30) == 0
    assert f"the configuration file {env.config} changed" in env.cl.proxy_log(env.node)
    probes = env.cl.lab.probe(env.node, "tcp", "10.96.7.10", 80, count=2, timeout=1.0)
    assert {r.pod for r in probes} == {"p0"}  # the rules stay, unmaintained, until the next start
