"""--service-counters with real packets: a node programmed by `nftproxy apply --service-counters`,
real TCP connections to a ClusterIP (from a pod) and to a NodePort (from a client outside), real
connection attempts to a Service without endpoints; the counts read as `nftproxy run` exports
them (operator/metrics.py's collector over the node's real table, rendered in Prometheus' text
format and parsed back).

Topology (testkit.lab.netlab): node1 runs pods a and b (web's endpoints) and pod cli (a client);
the client ext sits on the node network.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nftproxy.diagnose import counters
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator.metrics import Metrics
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.policy_lab import flow_flags
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

N_CLUSTER, M_NODEPORT, K_REFUSED, N_IPV6 = 5, 4, 3, 2
HTTP = [k.port(8080, "http")]


@dataclass
class Lab:
    lab: NetLab
    node: Node
    cli: Pod
    ext: Client
    manifest: Path
    objects: list[k.Obj]

    def apply(self, *extra: str) -> None:
        argv = nftproxy_argv("apply", "-f", str(self.manifest), *flow_flags(self.node), *extra)
        r = self.lab.exec(self.node, *argv, check=False)
        assert r.returncode == 0, r.stderr

    def nftproxy(self, *args: str) -> str:
        r = self.lab.exec(self.node, *nftproxy_argv(*args), check=False)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The nftproxy_service_* samples as `nftproxy run`'s /metrics serves them."""
        metrics = Metrics()
        backend = KernelBackend(self.node.netns)
        try:
            metrics.count_service_traffic(lambda: counters.read_families(backend, "nftproxy"))
            text = generate_latest(metrics.registry).decode()
        finally:
            backend.close()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            if fam.name.startswith("nftproxy_service_")
            for s in fam.samples
            if s.name.endswith("_total")
        }


def labels(service: str, kind: str, family: str = "IPv4", **extra: str) -> tuple[tuple[str, str], ...]:
    base = {"namespace": "default", "service": service, "port": "http", "protocol": "TCP", "kind": kind}
    return tuple(sorted({**base, "ip_family": family, **extra}.items()))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale("ct")
    with NetLab("ct") as nl:
        node = nl.add_node("node1", 1)
        a, b = (nl.add_pod(node, n, tcp=(8080,), udp=()) for n in ("a", "b"))
        cli = nl.add_pod(node, "cli", tcp=(), udp=())
        ext = nl.add_client("ext", 100, via=node)
        objs = [
            k.service("web", ["10.96.0.10", "fd00:10:96::10"], [k.port(80, "http", node_port=30080)], type="NodePort"),
            k.endpoint_slice("web-1", "web", [k.endpoint(p.ipv4, node="node1") for p in (a, b)], HTTP),
            k.endpoint_slice(
                "web-2", "web", [k.endpoint(p.ipv6, node="node1") for p in (a, b)], HTTP, address_type="IPv6"
            ),
            k.service("empty", ["10.96.0.20"], [k.port(80, "http", node_port=30090)], type="NodePort"),
        ]
        manifest = k.write(tmp_path_factory.mktemp("counters") / "objects.yaml", objs)
        lb = Lab(nl, node, cli, ext, manifest, objs)
        lb.apply("--service-counters")
        yield lb


def test_every_service_port_is_counted_from_zero(lab: Lab) -> None:
    before = lab.scrape()
    for service in ("web", "empty"):
        for kind in ("ClusterIP", "NodePort"):
            for metric in ("packets", "bytes", "connections"):
                assert before[(f"nftproxy_service_{metric}_total", labels(service, kind))] == 0
    for kind in ("ClusterIP", "NodePort"):  # no endpoints: its refusals counted from 0
        key = ("nftproxy_service_no_endpoint_packets_total", labels("empty", kind, verdict="reject"))
        assert before[key] == 0


def test_real_connections_are_counted_per_service_port_and_frontend(lab: Lab) -> None:
    before = lab.scrape()
    to_cluster = lab.lab.probe(lab.cli, "tcp", "10.96.0.10", 80, count=N_CLUSTER)
    to_nodeport = lab.lab.probe(lab.ext, "tcp", lab.node.ipv4, 30080, count=M_NODEPORT)
    refused = lab.lab.probe(lab.cli, "tcp", "10.96.0.20", 80, count=K_REFUSED, timeout=2.0)
    to_ipv6 = lab.lab.probe(lab.cli, "tcp", "fd00:10:96::10", 80, count=N_IPV6)
    assert all(r.ok for r in to_cluster + to_nodeport + to_ipv6), (to_cluster, to_nodeport, to_ipv6)
    assert [r.error for r in refused] == ["refused"] * K_REFUSED
    after = lab.scrape()

    def grew(metric: str, lab_: tuple[tuple[str, str], ...]) -> float:
        key = (f"nftproxy_service_{metric}_total", lab_)
        return after[key] - before.get(key, 0)

    for kind, n in (("ClusterIP", N_CLUSTER), ("NodePort", M_NODEPORT)):
        web = labels("web", kind)
        assert grew("connections", web) == n
        # a TCP connection that answers one line: handshake, data, ACKs, FINs, both ways (>= 7),
        # each 52 to 200 bytes (IP and TCP headers with options, the echo's JSON line)
        packets = grew("packets", web)
        assert 7 * n <= packets <= 14 * n, (kind, packets)
        assert 52 * packets <= grew("bytes", web) <= 200 * packets, (kind, packets, grew("bytes", web))
    assert grew("connections", labels("web", "ClusterIP", "IPv6")) == N_IPV6  # the ip6 table's own
    assert 7 * N_IPV6 <= grew("packets", labels("web", "ClusterIP", "IPv6")) <= 14 * N_IPV6
    rejected = ("nftproxy_service_no_endpoint_packets_total", labels("empty", "ClusterIP", verdict="reject"))
    assert after[rejected] - before[rejected] == K_REFUSED  # one SYN each, answered with a RST
    empty = labels("empty", "ClusterIP")
    assert grew("connections", empty) == 0 and grew("packets", empty) == 0  # never DNATed
    assert grew("connections", labels("empty", "NodePort")) == 0

    # explain and list read the same counts (no traffic since the scrape)
    explained = json.loads(lab.nftproxy("explain", "default/web", "-o", "json"))["counters"]
    by_kind = {r["kind"]: r for r in explained if r["family"] == "ip"}
    for kind in ("ClusterIP", "NodePort"):
        for metric in ("packets", "bytes", "connections"):
            assert by_kind[kind][metric] == after[(f"nftproxy_service_{metric}_total", labels("web", kind))]
    rows = json.loads(lab.nftproxy("list", "-o", "json"))["frontends"]
    empty_cluster = next(r for r in rows if r["service"] == "default/empty" and r["type"] == "ClusterIP")
    assert empty_cluster["counters"]["rejected"] == after[rejected]
    text = lab.nftproxy("explain", "default/web")
    assert f"ClusterIP [ip]: {int(by_kind['ClusterIP']['connections'])} connections" in text


def test_a_service_gone_leaves_no_series_and_counters_off_none(lab: Lab) -> None:
    k.write(lab.manifest, [o for o in lab.objects if o["metadata"]["name"].startswith("web")])
    lab.apply("--service-counters")
    series = lab.scrape()
    assert series and not any(dict(key)["service"] == "empty" for _, key in series)
    lab.apply()  # counters off: the table without them, nothing exported
    assert lab.scrape() == {}
    listing = lab.lab.exec(lab.node, "nft", "list", "table", "ip", "nftproxy").stdout
    assert "counter" not in listing
