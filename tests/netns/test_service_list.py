"""`nftproxy list` against the real kernel: a table `nftproxy apply` committed in a namespace of
the test's own, listed by the real command (text and JSON) from the kernel's listing; the rows
are the ones the compiled table gives (tests/unit/test_service_list.py checks those in detail)."""

from __future__ import annotations

import dataclasses
import json
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.diagnose.services import listing
from nftproxy.diagnose.tableview import view_of
from nftproxy.model.manifests import classify
from testkit.k8s import objects as k
from testkit.lab.netlab import bare_netns
from tests.support.run import run_nftproxy

pytestmark = pytest.mark.netns

HTTP = [k.port(8080, "http")]
OBJECTS = [
    k.service("web", ["10.96.0.10", "fd00:10:96::10"], [k.port(80, "http", node_port=30080)], type="NodePort",
              ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack",
              sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}),
    k.endpoint_slice("web-4", "web", [k.endpoint("10.244.1.2", node="node-1"), k.endpoint("10.244.2.2", node="node-2")],
                     HTTP),
    k.endpoint_slice("web-6", "web", [k.endpoint("fd00:10:244:1::2", node="node-1")], HTTP, address_type="IPv6"),
    k.service("lb", ["10.96.0.30"], [k.port(80, "http", node_port=30030)], type="LoadBalancer",
              lb_ips=["198.19.0.30"], externalTrafficPolicy="Local", loadBalancerSourceRanges=["203.0.113.0/24"],
              annotations={"nftproxy.io/load-balancing": "source-hash"}),
    k.endpoint_slice("lb-1", "lb", [k.endpoint(a, node=n) for a, n in
                                    (("10.244.1.3", "node-1"), ("10.244.2.3", "node-2"), ("10.244.2.4", "node-2"))],
                     HTTP),
    k.service("empty", ["10.96.0.20"], [k.port(53, "dns", "UDP")]),
]  # fmt: skip
FLAGS = ["--node-name", "node-1", "--node-ip", "198.18.0.1", "--node-ip", "fd00:198:18::1",
         "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:10:244::/48"]  # fmt: skip
CONFIG = ProxyConfig(
    node_name="node-1",
    node_ips=(ip_address("198.18.0.1"), ip_address("fd00:198:18::1")),
    cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48")),
)


def test_list_reads_every_frontend_from_the_kernel(tmp_path: Path) -> None:
    manifest = k.write(tmp_path / "objects.yaml", OBJECTS)
    with bare_netns("ls") as ns:
        run_nftproxy("apply", "-f", str(manifest), *FLAGS, netns=ns, check=True)
        text = run_nftproxy("list", "--netns", ns, check=True).stdout
        doc = json.loads(run_nftproxy("list", "--netns", ns, "-o", "json", check=True).stdout)
    print(text)  # the example in the report: `pytest -s`
    inputs = classify(OBJECTS)
    compiled = listing([view_of(t) for t in compile_tables(inputs.services, inputs.slices, CONFIG).tables])
    assert doc == json.loads(json.dumps(dataclasses.asdict(compiled)))  # the kernel's rows are the compiled ones
    rows = {(r["service"], r["family"], r["type"]): r for r in doc["frontends"]}
    assert set(rows) == {
        ("default/web", "ip", "ClusterIP"), ("default/web", "ip", "NodePort"),
        ("default/web", "ip6", "ClusterIP"), ("default/web", "ip6", "NodePort"),
        ("default/lb", "ip", "ClusterIP"), ("default/lb", "ip", "LoadBalancer"), ("default/lb", "ip", "NodePort"),
        ("default/empty", "ip", "ClusterIP"),
    }  # fmt: skip
    web6 = rows[("default/web", "ip6", "ClusterIP")]
    assert (web6["address"], web6["port"], web6["session_affinity_timeout"]) == ("fd00:10:96::10", 80, 60)
    assert web6["backends"] == [{"address": "fd00:10:244:1::2", "port": 8080, "slots": 1}]
    lb = rows[("default/lb", "ip", "LoadBalancer")]
    assert (lb["traffic_policy"], lb["load_balancing"]) == ("Local", "source-hash")
    assert lb["source_ranges"] == ["203.0.113.0/24"]
    assert [b["address"] for b in lb["backends"]] == ["10.244.1.3"]
    assert [b["address"] for b in lb["short_circuit_backends"]] == ["10.244.1.3", "10.244.2.3", "10.244.2.4"]
    assert rows[("default/empty", "ip", "ClusterIP")]["state"] == "no-endpoints"
    assert doc["nodeport_addresses"] == {"ip": ["198.18.0.1"], "ip6": ["fd00:198:18::1"]}
    lines = text.splitlines()
    assert lines[0].split() == ["SERVICE", "PORT", "TYPE", "FRONTEND", "POLICY", "BACKENDS"]
    assert any(line.split()[:4] == ["default/web", "http", "ClusterIP", "[fd00:10:96::10]:80/TCP"] for line in lines)
    assert lines[-1] == "3 Services, 8 frontends (ip nftproxy, ip6 nftproxy)"


def test_list_without_a_table_or_namespace() -> None:
    with bare_netns("ls") as ns:
        r = run_nftproxy("list", "--netns", ns)
        assert r.returncode == 1 and r.stdout.startswith("no nftproxy table"), r
    r = run_nftproxy("list", "--netns", "ls-absent-namespace")
    assert r.returncode == 2 and "no network namespace 'ls-absent-namespace'" in r.stderr
