"""What every cluster has, through nftproxy: the `kubernetes` Service (a pod with in-cluster config
reaches the API), cluster DNS (CoreDNS behind kube-dns at 10.96.0.10), and DNS that loses no
lookup while CoreDNS rolls or nftproxy itself rolls, for clients that open a new socket per query
and for clients that keep one UDP socket and source port (glibc's resolver): the stale-conntrack
outage every kube-proxy user knows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.k8s import objects
from testkit.realcluster import RealCluster
from testkit.realcluster import addons as dns
from testkit.realcluster import workload as w
from testkit.realcluster.node import APISERVER_IP

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]

CLIENTS = {"node-1": "dnsclient-1", "node-2": "dnsclient-2"}
NAME = "kubernetes.default.svc.cluster.local"
# CoreDNS's lameduck here: the time the endpoint change has to reach each node's proxy (the
# EndpointSlice controller, the watch, a sync at most 1 s after the one before). With kubeadm's 5 s
# one lookup of a fresh-socket client failed once in CI (2026-12-03), its cause not recorded (the
# client records it now: an error rcode, an ICMP error or a timeout, and when); 20 rollouts here, 8
# of them under CPU load, lost none. The likeliest cause is that change arriving after the lameduck
# under the whole suite's load; 10 s gives the control plane that slack and still fails a proxy
# that sends new flows to an exited pod or leaves a stale flow to it.
LAMEDUCK_S = 10


@pytest.fixture(scope="module")
def cluster_dns(cluster: RealCluster) -> Iterator[RealCluster]:
    w.helm_install(cluster)
    dns.install_coredns(cluster, lameduck=f"{LAMEDUCK_S}s")
    for node, pod in CLIENTS.items():
        cluster.kubectl("apply", "-f", "-", input=dns.client_pod_manifest(pod, node, cluster.images["nftproxy"]))
    web = [
        objects.service("dnsweb", (), [objects.port(80, target=8080)], selector={"app": "dnsweb"}),
        objects.service("dnsweb-headless", (), [objects.port(80, target=8080)], selector={"app": "dnsweb"}),
        objects.service("dnsext", (), [], type="ExternalName", externalName="web.example.invalid"),
    ]
    web[1]["spec"]["clusterIP"] = "None"
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"dnsweb-{i}", "namespace": "default", "labels": {"app": "dnsweb"}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "echo", "image": "localhost/nftproxy-echo:1", "imagePullPolicy": "Never"}],
            },
        }
        for i in (1, 2)
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": web + pods}))
    cluster.kubectl("wait", "--for=condition=Ready", "pod", *CLIENTS.values(), "dnsweb-1", "dnsweb-2", "--timeout=120s")
    yield cluster
    cluster.kubectl("delete", "pod", "--wait=false", *CLIENTS.values(), "dnsweb-1", "dnsweb-2", check=False)
    cluster.kubectl("delete", "service", "dnsweb", "dnsweb-headless", "dnsext", check=False)


def test_kubernetes_service_has_the_apiserver_as_endpoint(cluster_dns: RealCluster) -> None:
    ep = cluster_dns.kubectl_json(
        "get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=kubernetes"
    )
    addrs = {(a, p["port"]) for s in ep["items"] for e in s["endpoints"] for a in e["addresses"] for p in s["ports"]}
    assert addrs == {(APISERVER_IP, cluster_dns.apiserver_port)}


@pytest.mark.parametrize("pod", CLIENTS.values())
def test_a_pod_with_in_cluster_config_reaches_the_api(cluster_dns: RealCluster, pod: str) -> None:
    """https://kubernetes.default.svc: its name from CoreDNS, then 10.96.0.1:443 through nftproxy to
    the apiserver, whose certificate carries the name (checked against the ServiceAccount's CA)."""
    version = dns.api_get(cluster_dns, pod, "/version")
    assert version["gitVersion"].startswith("v1."), version


@pytest.mark.parametrize("pod", CLIENTS.values())
def test_a_pod_resolves_service_names(cluster_dns: RealCluster, pod: str) -> None:
    c = cluster_dns
    cluster_ip = w.cluster_ip(c, "dnsweb")
    assert dns.dns_query(c, pod, "dnsweb.default.svc.cluster.local") == {"result": "ok", "answers": [["A", cluster_ip]]}
    pod_ips = {p["status"]["podIP"] for p in c.kubectl_json("get", "pods", "-l", "app=dnsweb")["items"]}
    headless = dns.dns_query(c, pod, "dnsweb-headless.default.svc.cluster.local")
    assert headless["result"] == "ok" and {a for t, a in headless["answers"] if t == "A"} == pod_ips, headless
    cname = dns.dns_query(c, pod, "dnsext.default.svc.cluster.local", "CNAME")
    assert cname == {"result": "ok", "answers": [["CNAME", "web.example.invalid"]]}
    assert dns.dns_query(c, pod, "nothing-here.default.svc.cluster.local")["result"] == "failed"  # NXDOMAIN


def lookups_during(c: RealCluster, action: Any) -> dict[str, dict[str, Any]]:
    """Continuous lookups from a pod on each node, fresh and reused sockets, around ACTION."""
    loops = {
        f"{pod} {mode}": dns.DNSLoop(c, pod, NAME, mode) for pod in CLIENTS.values() for mode in ("fresh", "reuse")
    }
    try:
        time.sleep(3)  # they run before ACTION starts
        action()
        time.sleep(LAMEDUCK_S + 3)  # past CoreDNS's lameduck and one more sync
    finally:
        results = {k: loop.stop() for k, loop in loops.items()}
    print(json.dumps(results, indent=1))
    return results


def assert_no_lookup_lost(results: dict[str, dict[str, Any]]) -> None:
    for name, r in results.items():
        assert r["ok"] > 100, (name, r)  # it really ran all along
        assert (r["failed"], r["timeout"]) == (0, 0), (name, r)
        if name.endswith("reuse"):
            assert r["source_ports"] == 1, (name, r)
        else:  # a new port each time (the kernel may hand one out again after a while)
            assert r["source_ports"] > r["ok"] / 2, (name, r)


def dns_pods(c: RealCluster) -> set[str]:
    items = c.kubectl_json("get", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns")["items"]
    return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}


def test_coredns_rollout_loses_no_lookup(cluster_dns: RealCluster) -> None:
    c = cluster_dns
    before = dns_pods(c)

    def roll() -> None:
        dns.roll_coredns(c, "dns-rollout-test")
        dns.wait_coredns(c)

    results = lookups_during(c, roll)
    after = dns_pods(c)
    assert not before & after, (before, after)  # both replicas replaced
    assert_no_lookup_lost(results)


def test_nftproxy_rollout_loses_no_lookup(cluster_dns: RealCluster) -> None:
    c = cluster_dns
    revision = w.helm_revision(c)
    results = lookups_during(c, lambda: w.helm_upgrade(c, {"podAnnotations.rollout": "dns-test"}))
    assert w.helm_revision(c) == revision + 1
    assert_no_lookup_lost(results)
