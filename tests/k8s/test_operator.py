"""`nftproxy run` against a real kube-apiserver: API objects in, real packets through.

One node namespace (netlab) with pods, its Node object, and the operator running here with
--netns (API on loopback, nftables and /healthz in the node's namespace).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from nftproxy import __version__
from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale

pytestmark = [pytest.mark.k8s, pytest.mark.netns]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


KOPF_LIVENESS = f"http://127.0.0.1:{_free_port()}/healthz"
FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s", "--kopf-liveness", KOPF_LIVENESS)


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    pods: list[Pod]
    ext: Client

    def probe(self, src: Node | Pod | Client, dest: str, port: int, count: int = 1, proto: str = "tcp") -> set[str]:
        return {r.pod or str(r.error) for r in self.cl.lab.probe(src, proto, dest, port, count=count, timeout=1.0)}


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    cleanup_stale()
    with NetLab() as lab:
        cl = LocalCluster(control_plane, lab, tmp_path_factory.mktemp("operator"))
        try:
            node = cl.add_node("e2e-node", 1)
            pods = [lab.add_pod(node, f"p{i}", tcp=(8080,), udp=(5353,)) for i in range(3)]
            ext = lab.add_client("ext", 100, via=node)
            cl.start_proxy(node, *FLAGS)
            eventually(lambda: cl.proxy_status(node).get("status", {}).get("syncs"), what="first sync")
            yield Env(cl, node, pods, ext)
        finally:
            log = cl.proxy_log(node) if cl.proxies else ""
            cl.close()
            if log and "Traceback" in log:
                print(log[-5000:])


@pytest.fixture(autouse=True)
def no_traceback_in_the_log(env: Env) -> Iterator[None]:
    """Each test checks the operator's log: what it added during the test has no traceback (the
    log is appended to, also across the restarts some tests do)."""
    start = len(env.cl.proxy_log(env.node))
    yield
    added = env.cl.proxy_log(env.node)[start:]
    assert "Traceback" not in added, added[-5000:]


def slice_for(name: str, ns: str, pods: list[Pod], trigger: str | None = None) -> k.Obj:
    s = k.endpoint_slice(
        f"{name}-abc", name, [k.endpoint(p.ipv4, node="e2e-node") for p in pods], [k.port(8080, "http")], namespace=ns
    )
    if trigger:
        s["metadata"]["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": trigger}
    return s


def test_service_lifecycle_with_real_connections(env: Env) -> None:
    cl, node, (a, b, c) = env.cl, env.node, env.pods
    ns = cl.namespace("lifecycle")
    cl.apply(k.service("web", ["10.96.1.10"], [k.port(80, "http")], namespace=ns), slice_for("web", ns, [a, b]))
    eventually(lambda: env.probe(node, "10.96.1.10", 80, 12) == {"p0", "p1"}, what="web on p0+p1")

    cl.apply(slice_for("web", ns, [a, b, c]))  # scale up
    eventually(lambda: env.probe(node, "10.96.1.10", 80, 20) == {"p0", "p1", "p2"}, what="scaled up to 3")

    cl.apply(slice_for("web", ns, [c]))  # scale down
    eventually(lambda: env.probe(node, "10.96.1.10", 80, 10) == {"p2"}, what="scaled down to p2")

    cl.apply(k.service("web", ["10.96.1.10"], [k.port(80, "http", node_port=30111)], namespace=ns, type="NodePort"))
    eventually(lambda: env.probe(env.ext, node.ipv4, 30111, 3) == {"p2"}, what="NodePort from outside")

    cl.delete("service", "web", ns)
    eventually(lambda: env.probe(node, "10.96.1.10", 80, 2) == {"timeout"}, what="ClusterIP gone")
    cl.delete("endpointslice", "web-abc", ns)


def test_service_without_endpoints_is_rejected(env: Env) -> None:
    ns = env.cl.namespace("empty")
    env.cl.apply(k.service("empty", ["10.96.1.20"], [k.port(80)], namespace=ns))
    eventually(lambda: env.probe(env.node, "10.96.1.20", 80, 2) == {"refused"}, what="reject")


def test_proxystatus_reports_the_node_in_sync_with_counts(env: Env) -> None:
    ns = env.cl.namespace("counted")
    env.cl.apply(
        k.service("counted", ["10.96.1.30"], [k.port(80, "http")], namespace=ns), slice_for("counted", ns, env.pods[:2])
    )
    eventually(lambda: env.probe(env.node, "10.96.1.30", 80, 12) == {"p0", "p1"}, what="counted served")

    def in_sync() -> dict[str, object] | None:
        st = env.cl.proxy_status(env.node).get("status", {})
        cond = {c["type"]: c["status"] for c in st.get("conditions", [])}
        services = json.loads(env.cl.cp.kubectl("get", "services", "-A", "-o", "json").stdout)["items"]
        proxied = [s for s in services if s["spec"].get("clusterIP") not in (None, "", "None")]
        # the counts follow a partial sync within a second (computed at most once a second)
        ok = cond.get("InSync") == "True" and st.get("services") == len(proxied) and st.get("endpoints", 0) >= 2
        return st if ok else None

    st = eventually(in_sync, what="ProxyStatus in sync with the Service count")
    assert st["version"] == __version__  # the release running on the node, kept by the CRD's schema
    assert st["endpoints"] and st["lastSyncTime"] and st["rulesetChecksum"]
    table = env.cl.cp.kubectl("get", "proxystatus").stdout
    header = r"^NAME\s+NODE\s+SERVICES\s+ENDPOINTS\s+IN-SYNC\s+LAST-SYNC\s+DURATION\s+VERSION\s+KUBE-PROXY\s+AGE"
    assert re.search(header, table, re.M), table
    conditions = env.cl.proxy_status(env.node)["status"]["conditions"]
    detected = {c["type"]: c["status"] for c in conditions}.get("KubeProxyDetected", "<none>")
    row = rf"^e2e-node\s+e2e-node\s+\d+\s+\d+\s+True\s+\S+\s+\S+\s+{re.escape(__version__)}\s+{detected}\s+"
    assert re.search(row, table, re.M), table
    owner = env.cl.proxy_status(env.node)["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Node" and owner["name"] == "e2e-node"


def test_operator_never_writes_to_what_it_watches(env: Env) -> None:
    ns = env.cl.namespace("readonly")
    env.cl.apply(k.service("ro", ["10.96.1.40"], [k.port(80, "http")], namespace=ns), slice_for("ro", ns, env.pods[:1]))
    eventually(lambda: env.probe(env.node, "10.96.1.40", 80, 1) == {"p0"}, what="ro served")
    before = {
        "svc": env.cl.get("service", "ro", ns)["metadata"],
        "slice": env.cl.get("endpointslice", "ro-abc", ns)["metadata"],
        "node": env.cl.get("node", "e2e-node")["metadata"],
    }
    # more events flow (another Service, a status write, a periodic full resync of 5 s)
    env.cl.apply(k.service("ro2", ["10.96.1.41"], [k.port(80)], namespace=ns))
    eventually(lambda: env.probe(env.node, "10.96.1.41", 80, 1) == {"refused"}, what="ro2 rejected")
    time.sleep(6)
    after = {
        "svc": env.cl.get("service", "ro", ns)["metadata"],
        "slice": env.cl.get("endpointslice", "ro-abc", ns)["metadata"],
        "node": env.cl.get("node", "e2e-node")["metadata"],
    }
    for kind, meta in before.items():
        assert after[kind]["resourceVersion"] == meta["resourceVersion"], kind
        assert not after[kind].get("finalizers"), kind
        assert after[kind].get("annotations") == meta.get("annotations"), kind


def test_conflicts_and_orphans_are_reported_others_keep_working(env: Env) -> None:
    """Two Services with one externalIP and port: the older keeps it, the newer loses that
    frontend only (its ClusterIP keeps answering), reported for that frontend."""
    ns = env.cl.namespace("badinput")
    env.cl.apply(
        k.service("second", ["10.96.1.50"], [k.port(80, "http")], namespace=ns, external_ips=["198.19.5.5"]),
        slice_for("second", ns, env.pods[:1]),
    )
    eventually(lambda: env.probe(env.node, "10.96.1.50", 80, 1) == {"p0"}, what="the older Service served")
    time.sleep(1.1)  # creationTimestamp has seconds: the second Service is newer
    env.cl.apply(
        k.service("first", ["10.96.1.51"], [k.port(80, "http")], namespace=ns, external_ips=["198.19.5.5"]),
        slice_for("first", ns, env.pods[1:2]),
        slice_for("ghost", ns, env.pods[2:]),
    )

    def reported() -> list[dict[str, str]] | None:
        skipped = env.cl.proxy_status(env.node).get("status", {}).get("skipped", [])
        mine = [s for s in skipped if s.get("namespace") == ns]
        return mine if len(mine) == 2 else None

    skipped = eventually(reported, what="two skipped objects in ProxyStatus")
    reasons = sorted(f"{s['kind']} {s['name']}: {s['reason']}" for s in skipped)
    created = env.cl.get("service", "second", ns)["metadata"]["creationTimestamp"]
    assert reasons == [
        "EndpointSlice ghost-abc: no Service badinput/ghost",
        f"Service first: 198.19.5.5 . tcp . 80 is left out for this Service: Service badinput/second claimed it "
        f"first (created {created}); its other frontends are programmed",
    ]

    def events() -> str | None:
        msgs = [f"{e['involvedObject']['name']} {e['reason']}" for e in env.cl.proxy_events(ns)]
        return " ".join(sorted(msgs)) if len(msgs) >= 2 else None

    assert eventually(events, what="Events") == "first PortConflict ghost-abc InvalidObject"
    # the older Service keeps the externalIP; the newer keeps its own ClusterIP
    assert env.probe(env.ext, "198.19.5.5", 80, 1) == {"p0"}
    eventually(lambda: env.probe(env.node, "10.96.1.51", 80, 1) == {"p1"}, what="the newer one's ClusterIP")
    env.cl.delete("service", "second", ns)  # the conflict is gone: the newer takes over the externalIP
    eventually(lambda: env.probe(env.ext, "198.19.5.5", 80, 1) == {"p1"}, what="the externalIP moved")


def test_a_tenant_naming_another_services_clusterip_takes_no_port_of_it(env: Env) -> None:
    """A tenant's Service whose externalIP is another Service's ClusterIP, on one of its ports
    (kube-dns's 53/UDP, say): that port stays the ClusterIP's Service's, although the tenant's
    Service is older and sorts first; the victim's other ports and the tenant's own ClusterIP
    answer too, from a pod and from the node."""
    victim_ns, tenant_ns = env.cl.namespace("tk-system"), env.cl.namespace("tk-default")
    a, b, client = env.pods

    def dns_slice(name: str, ns: str, pod: Pod) -> k.Obj:
        ports = [k.port(5353, "dns", "UDP"), k.port(8080, "dns-tcp"), k.port(8080, "metrics")]
        return k.endpoint_slice(f"{name}-abc", name, [k.endpoint(pod.ipv4, node="e2e-node")], ports, namespace=ns)

    env.cl.apply(
        k.service("x", ["10.96.1.71"], [k.port(53, "dns", "UDP", target=5353)], namespace=tenant_ns,
                  external_ips=["10.96.1.70"]),
        k.endpoint_slice("x-abc", "x", [k.endpoint(b.ipv4, node="e2e-node")], [k.port(5353, "dns", "UDP")],
                         namespace=tenant_ns),
    )  # fmt: skip
    time.sleep(1.1)  # the tenant's Service is the older one
    dns_ports = [k.port(53, "dns", "UDP", target=5353), k.port(53, "dns-tcp", target=8080),
                 k.port(9153, "metrics", target=8080)]  # fmt: skip
    env.cl.apply(
        k.service("kube-dns", ["10.96.1.70"], dns_ports, namespace=victim_ns), dns_slice("kube-dns", victim_ns, a)
    )
    for src in (env.node, client):

        def dns_answers(src: Node | Pod = src) -> bool:
            return env.probe(src, "10.96.1.70", 53, 2, "udp") == {"p0"}

        eventually(dns_answers, what=f"53/UDP from {src.name}")
        assert env.probe(src, "10.96.1.70", 53, 2) == {"p0"}
        assert env.probe(src, "10.96.1.70", 9153, 2) == {"p0"}
        assert env.probe(src, "10.96.1.71", 53, 2, "udp") == {"p1"}  # the tenant's own ClusterIP

    def reported() -> list[str] | None:
        skipped = env.cl.proxy_status(env.node).get("status", {}).get("skipped", [])
        mine = [f"{s['namespace']}/{s['name']}: {s['reason']}" for s in skipped if s.get("namespace") == tenant_ns]
        return mine or None

    assert eventually(reported, what="the tenant's lost frontend in ProxyStatus") == [
        f"{tenant_ns}/x: 10.96.1.70 . udp . 53 is left out for this Service: it is the ClusterIP of Service "
        f"{victim_ns}/kube-dns; its other frontends are programmed"
    ]
    env.cl.delete("service", "kube-dns", victim_ns)
    env.cl.delete("endpointslice", "kube-dns-abc", victim_ns)
    eventually(lambda: env.probe(env.node, "10.96.1.70", 53, 1, "udp") == {"p1"}, what="the externalIP, once free")
    env.cl.delete("service", "x", tenant_ns)
    env.cl.delete("endpointslice", "x-abc", tenant_ns)


def test_metrics_and_healthz_served_in_the_node_namespace(env: Env) -> None:
    ns = env.cl.namespace("metrics")
    env.cl.apply(
        k.service("m", ["10.96.1.60"], [k.port(80, "http")], namespace=ns),
        slice_for("m", ns, env.pods[:1], trigger="2026-01-01T00:00:00Z"),
    )
    eventually(lambda: env.probe(env.node, "10.96.1.60", 80, 1) == {"p0"}, what="m served")
    code, body = env.cl.http_get(env.node, 10256, "/healthz")
    assert code == 200 and json.loads(body)["healthy"] is True and json.loads(body)["nodeEligible"] is True
    code, body = env.cl.http_get(env.node, 10256, "/livez")
    assert code == 200 and "nodeEligible" not in json.loads(body)
    code, text = env.cl.http_get(env.node, 10249, "/metrics")
    assert code == 200
    fam = '{ip_family="IPv4"}'
    assert re.search(rf"^kubeproxy_sync_proxy_rules_duration_seconds_count{fam} [1-9]", text, re.M), text[:500]
    assert re.search(rf"^kubeproxy_network_programming_duration_seconds_count{fam} [1-9]", text, re.M)
    assert re.search(rf"^kubeproxy_sync_full_proxy_rules_duration_seconds_count{fam} [1-9]", text, re.M)
    assert re.search(rf"^kubeproxy_sync_proxy_rules_nftables_sync_failures_total{fam} 0", text, re.M)
    assert re.search(r'^kubeproxy_proxy_healthz_total\{code="200"\} [1-9]', text, re.M)
    assert re.search(r'^kubeproxy_proxy_livez_total\{code="200"\} [1-9]', text, re.M)
    assert f'nftproxy_build_info{{version="{__version__}"}} 1.0' in text.splitlines()


def _metric(env: Env, name: str) -> float:
    _, text = env.cl.http_get(env.node, 10249, "/metrics")
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


SYNCS = 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}'


NODE_EVENTS = 'nftproxy_watch_events_total{resource="nodes"}'


def test_only_our_own_nodes_events_reach_the_proxy(env: Env) -> None:
    """1,000 other Nodes are created and their status updated (2,000 events in the API): the
    proxy's Node watch receives none of them (server-side field selector), and still gets its
    own Node's update. The counter counts every Node event kopf delivers, before any filter."""
    from nftproxy.operator import kube  # noqa: PLC0415

    api = kube.connect(str(env.cl.cp.kubeconfig))
    names = [f"ft-bulk-{i}" for i in range(1000)]

    def settled() -> float | None:
        first = _metric(env, NODE_EVENTS)
        time.sleep(1)
        return first if _metric(env, NODE_EVENTS) == first else None

    before = eventually(settled, what="no Node event in flight")

    def create(name: str) -> None:
        node = {"metadata": {"name": name, "labels": {"nftproxy-test": "bulk"}}}
        api.request("POST", "/api/v1/nodes", body=node)

    def update_status(name: str) -> None:
        status = {"status": {"addresses": [{"type": "InternalIP", "address": "198.18.9.9"}]}}
        api.request("PATCH", f"/api/v1/nodes/{name}/status", body=status)

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, names))
            list(pool.map(update_status, names))
        env.cl.cp.kubectl("label", "node", "e2e-node", "nftproxy-test=own", "--overwrite")
        eventually(lambda: _metric(env, NODE_EVENTS) > before, what="our own Node's update received")
        time.sleep(2)  # any other Node's event still in flight arrives meanwhile
        received = _metric(env, NODE_EVENTS) - before
        assert 1 <= received <= 2, f"{received} Node events received for 1 own update among 2,000 others"
    finally:
        env.cl.cp.kubectl("delete", "nodes", "-l", "nftproxy-test=bulk", "--wait=false", check=False)
        env.cl.cp.kubectl("label", "node", "e2e-node", "nftproxy-test-", check=False)
        api.close()


def test_api_outage_keeps_rules_syncs_go_on_and_converges_after(env: Env, control_plane: ControlPlane) -> None:
    ns = env.cl.namespace("outage")
    env.cl.apply(k.service("o", ["10.96.1.70"], [k.port(80, "http")], namespace=ns), slice_for("o", ns, env.pods[:1]))
    eventually(lambda: env.probe(env.node, "10.96.1.70", 80, 1) == {"p0"}, what="o served")
    control_plane.stop_apiserver()
    try:
        syncs = _metric(env, SYNCS)
        # The table is deleted while the API is down: only the operator's own periodic check
        # (every --sync-period, 5 s here) can bring it back; it needs no API to do so.
        # That check may come at any moment, even before a probe could see the Service fail: the
        # proof is the table itself, gone (the delete succeeded) and then made again.
        subprocess.run(["ip", "netns", "exec", env.node.netns, "nft", "delete", "table", "ip", "nftproxy"], check=True)
        eventually(lambda: _table_exists(env), timeout=20, what="the table made again, no API")
        eventually(lambda: env.probe(env.node, "10.96.1.70", 80, 1) == {"p0"}, timeout=20, what="repaired, no API")
        assert _metric(env, SYNCS) > syncs, "syncs went on without the API"
        assert env.cl.proxies["e2e-node"].poll() is None, "the operator must not exit"
        assert env.probe(env.node, "10.96.1.70", 80, 3) == {"p0"}, "rules must stay"
    finally:
        control_plane.start_apiserver()
    env.cl.apply(slice_for("o", ns, env.pods[1:2]))
    eventually(lambda: env.probe(env.node, "10.96.1.70", 80, 3) == {"p1"}, timeout=60, what="converged after outage")


def _table_exists(env: Env) -> bool:
    cmd = ["ip", "netns", "exec", env.node.netns, "nft", "list", "table", "ip", "nftproxy"]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def test_restart_keeps_traffic_and_adopts_the_table(env: Env) -> None:
    ns = env.cl.namespace("restart")
    env.cl.apply(k.service("r", ["10.96.1.80"], [k.port(80, "http")], namespace=ns), slice_for("r", ns, env.pods[:2]))
    eventually(lambda: env.probe(env.node, "10.96.1.80", 80, 10) == {"p0", "p1"}, what="r served")
    assert env.cl.stop_proxy(env.node, signal.SIGTERM) == 0
    # proxy down: rules stay, traffic keeps flowing
    assert env.probe(env.node, "10.96.1.80", 80, 10) == {"p0", "p1"}
    handles = subprocess.run(
        ["ip", "netns", "exec", env.node.netns, "nft", "-a", "list", "table", "ip", "nftproxy"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    env.cl.start_proxy(env.node, *FLAGS)
    eventually(lambda: "initial lists loaded" in env.cl.proxy_log(env.node).split("stopped;")[-1], what="restarted")
    eventually(lambda: env.cl.http_get(env.node, 10256, "/healthz")[0] == 200, what="healthy again")
    after = subprocess.run(
        ["ip", "netns", "exec", env.node.netns, "nft", "-a", "list", "table", "ip", "nftproxy"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # adopted: no chain or rule was recreated (same handles), the elements are the same
    assert _rules(after) == _rules(handles)
    assert env.probe(env.node, "10.96.1.80", 80, 10) == {"p0", "p1"}


def test_a_restart_replays_nothing_its_watches_start_at_its_own_list(env: Env) -> None:
    """After a restart, our watches start at the resourceVersion of our own initial list: the
    Services and EndpointSlices that exist (a dozen from the tests before) come as no event at
    all, and a change made after the start comes as exactly one event and is programmed."""
    ns = env.cl.namespace("noreplay")
    assert env.cl.stop_proxy(env.node, signal.SIGTERM) == 0
    env.cl.start_proxy(env.node, *FLAGS)
    eventually(lambda: "initial lists loaded" in env.cl.proxy_log(env.node).split("stopped;")[-1], what="restarted")
    eventually(lambda: env.cl.http_get(env.node, 10256, "/healthz")[0] == 200, what="healthy again")
    services = 'nftproxy_watch_events_total{resource="services"}'
    slices = 'nftproxy_watch_events_total{resource="endpointslices"}'
    time.sleep(2)  # a replay would be under way by now
    assert (_metric(env, services), _metric(env, slices)) == (0.0, 0.0), "kopf replayed its own list"
    env.cl.apply(k.service("late", ["10.96.1.85"], [k.port(80, "http")], namespace=ns))
    eventually(lambda: env.probe(env.node, "10.96.1.85", 80, 1) == {"refused"}, what="late Service programmed")
    assert _metric(env, services) == 1.0


def _rules(listing: str) -> list[str]:
    return [ln.strip() for ln in listing.splitlines() if "# handle" in ln and "elements" not in ln]


def test_health_check_node_port_reports_local_endpoints(env: Env) -> None:
    ns = env.cl.namespace("hc")
    svc = k.service(
        "lb",
        ["10.96.1.90"],
        [k.port(80, "http", node_port=30190)],
        namespace=ns,
        type="LoadBalancer",
        lb_ips=["198.19.1.90"],
        externalTrafficPolicy="Local",
        healthCheckNodePort=32190,
    )
    env.cl.apply(svc, slice_for("lb", ns, env.pods[:2]))
    # a cloud controller would publish the LoadBalancer IP in the status subresource
    status = json.dumps({"status": svc["status"]})
    env.cl.cp.kubectl("patch", "service", "lb", "-n", ns, "--subresource=status", "--type=merge", "-p", status)
    eventually(lambda: env.probe(env.ext, "198.19.1.90", 80, 6) == {"p0", "p1"}, what="LB IP served locally")
    assert {r.peer for r in env.cl.lab.probe(env.ext, "tcp", "198.19.1.90", 80, count=4)} == {env.ext.ipv4}

    def answering(want: int) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            try:
                code, body = env.cl.http_get(env.node, 32190, "/healthz")
            except Exception:
                return None
            return dict(json.loads(body)) if code == want else None

        return check

    body = eventually(answering(200), what="health check 200")
    assert body == {"service": {"namespace": ns, "name": "lb"}, "localEndpoints": 2, "serviceProxyHealthy": True}
    # the endpoints move to another node: this node has none -> 503 (the LB stops sending here)
    other = k.endpoint_slice(
        "lb-abc",
        "lb",
        [k.endpoint(p.ipv4, node="elsewhere") for p in env.pods[:2]],
        [k.port(8080, "http")],
        namespace=ns,
    )
    env.cl.apply(other)
    body = eventually(answering(503), what="health check 503")
    assert body["localEndpoints"] == 0
    # and external traffic to the LoadBalancer IP is dropped here (no local endpoint)
    assert env.probe(env.ext, "198.19.1.90", 80, 2) == {"timeout"}


def test_session_affinity_through_the_api(env: Env) -> None:
    ns = env.cl.namespace("affinity")
    svc = k.service("sticky", ["10.96.1.100"], [k.port(80, "http")], namespace=ns, sessionAffinity="ClientIP")
    svc["spec"]["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 60}}
    env.cl.apply(svc, slice_for("sticky", ns, env.pods))
    eventually(lambda: env.probe(env.node, "10.96.1.100", 80, 1) <= {"p0", "p1", "p2"}, what="sticky served")
    seen = [r.pod for r in env.cl.lab.probe(env.node, "tcp", "10.96.1.100", 80, count=15)]
    assert len(set(seen)) == 1, seen


def test_topology_hints_through_the_api(env: Env) -> None:
    env.cl.cp.kubectl("label", "node", "e2e-node", "topology.kubernetes.io/zone=zone-a", "--overwrite")
    ns = env.cl.namespace("topology")
    env.cl.apply(
        k.service("close", ["10.96.1.110"], [k.port(80, "http")], namespace=ns, trafficDistribution="PreferClose")
    )
    sl = slice_for("close", ns, env.pods[:2])
    sl["endpoints"][0]["hints"] = {"forZones": [{"name": "zone-a"}]}
    sl["endpoints"][1]["hints"] = {"forZones": [{"name": "zone-b"}]}
    env.cl.apply(sl)
    eventually(lambda: env.probe(env.node, "10.96.1.110", 80, 12) == {"p0"}, what="only the zone-a endpoint")
    # the node moves to zone-b: the other endpoint
    env.cl.cp.kubectl("label", "node", "e2e-node", "topology.kubernetes.io/zone=zone-b", "--overwrite")
    eventually(lambda: env.probe(env.node, "10.96.1.110", 80, 12) == {"p1"}, what="only the zone-b endpoint")
    env.cl.cp.kubectl("label", "node", "e2e-node", "topology.kubernetes.io/zone-")


def test_a_table_deleted_behind_its_back_is_repaired(env: Env) -> None:
    ns = env.cl.namespace("repair")
    env.cl.apply(
        k.service("fix", ["10.96.1.120"], [k.port(80, "http")], namespace=ns), slice_for("fix", ns, env.pods[:1])
    )
    eventually(lambda: env.probe(env.node, "10.96.1.120", 80, 1) == {"p0"}, what="fix served")
    syncs = _metric(env, SYNCS)
    # The proxy checks its table every --sync-period (5 s here) and rebuilds it. That check may
    # come at any moment, even before a probe could see the Service fail (as in the outage test
    # above): the proof is the table itself, gone (the delete succeeded) and then made again.
    subprocess.run(["ip", "netns", "exec", env.node.netns, "nft", "delete", "table", "ip", "nftproxy"], check=True)
    eventually(lambda: _table_exists(env), timeout=20, what="the table made again")
    eventually(lambda: env.probe(env.node, "10.96.1.120", 80, 1) == {"p0"}, timeout=20, what="table repaired")
    assert _metric(env, SYNCS) > syncs, "the table was made again by a sync"


def test_kopf_liveness_probe_reports_the_last_sync(env: Env) -> None:
    with urllib.request.urlopen(KOPF_LIVENESS, timeout=5) as r:
        body = json.loads(r.read())
    assert r.status == 200 and body.get("lastSync"), body


def test_dual_stack_service_through_the_api(env: Env) -> None:
    ns = env.cl.namespace("dualstack")
    svc = k.service("ds", ["10.96.1.130", "fd00:10:96::130"], [k.port(80, "http")], namespace=ns)
    svc["spec"].update(ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack")
    v6 = k.endpoint_slice(
        "ds-v6", "ds", [k.endpoint(p.ipv6, node="e2e-node") for p in env.pods[:2]], [k.port(8080, "http")],
        namespace=ns, address_type="IPv6",
    )  # fmt: skip
    env.cl.apply(svc, slice_for("ds", ns, env.pods[:2]), v6)
    eventually(lambda: env.probe(env.node, "10.96.1.130", 80, 8) == {"p0", "p1"}, what="IPv4 ClusterIP")
    eventually(lambda: env.probe(env.node, "fd00:10:96::130", 80, 8) == {"p0", "p1"}, what="IPv6 ClusterIP")
