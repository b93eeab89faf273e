"""nftproxy installed with `helm install` on a real cluster (testkit.realcluster): kubelet nodes,
workloads whose EndpointSlices come from the real controller, real requests. nftproxy comes from
the release's artefacts, as an operator gets them from `make release` (hack/release.sh): the
packaged chart (.tgz) with its default image, imported into each node from the image archive.

One cluster for all of them. Each test gets what it needs from the fixtures (the images, the
cluster, the release, the workload, nftproxy's rolling update), so any one of them passes alone;
together they share that state, in file order. The uninstall test removes the release: it is the
last one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.k8s.cluster import eventually
from testkit.realcluster import RealCluster
from testkit.realcluster import workload as w
from testkit.realcluster.release import Release
from tests.support.machine import machine_sysctls

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def release(release_artefacts: Release, cluster: RealCluster) -> Iterator[RealCluster]:
    """The packaged chart installed with its default image (the archive's, imported into the nodes)."""
    cluster.import_image(release_artefacts.containerd_ref, release_artefacts.archive)
    w.helm_upgrade(cluster, None, "--install", chart=release_artefacts.chart, default_image=True)
    yield cluster


@pytest.fixture(scope="module")
def web(release: RealCluster) -> RealCluster:
    c = release
    c.kubectl("apply", "-f", "-", input=w.web_manifests())
    c.kubectl("rollout", "status", "deployment/web", "--timeout=120s")
    c.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=120s")
    return c


def in_sync(c: RealCluster) -> dict[str, dict[str, Any]] | None:
    st = w.proxy_statuses(c)
    ok = {n: s for n, s in st.items() if w.condition(s, "InSync")}
    return st if set(ok) >= {n.name for n in c.nodes} else None


def served(c: RealCluster, node: str, ip: str) -> bool:
    return ip in w.nft_table(c, node)


def web_pods(c: RealCluster) -> dict[str, str]:
    """name -> IP of the web pods that are not terminating."""
    items = c.kubectl_json("get", "pods", "-n", "default", "-l", "app=web")["items"]
    return {
        p["metadata"]["name"]: p["status"].get("podIP", "") for p in items if not p["metadata"].get("deletionTimestamp")
    }


# ---------------------------------------------------------------------------------------------- cluster


def test_cluster_nodes_ready_and_machine_untouched(cluster: RealCluster, sysctls_before: dict[str, str]) -> None:
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    ips = {
        n["metadata"]["name"]: [a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"]
        for n in nodes
    }
    assert ips == {"node-1": ["172.30.0.11", "fd00:172:30::11"], "node-2": ["172.30.0.12", "fd00:172:30::12"]}
    for n in nodes:
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    # pod CIDRs routed between the nodes
    assert "10.244.2.0/24 via 172.30.0.12" in cluster.on_node("node-1", "ip", "route")
    assert "10.244.1.0/24 via 172.30.0.11" in cluster.on_node("node-2", "ip", "route")
    # kubelet's sysctls and iptables stayed in the nodes; nothing of theirs is mounted here
    assert machine_sysctls() == sysctls_before
    assert cluster.on_node("node-1", "cat", "/proc/sys/kernel/panic").strip() == "10"  # what kubelet wants, a file
    assert "KUBE-" not in subprocess.run(["iptables-save"], capture_output=True, text=True, check=False).stdout
    assert "KUBE-" in cluster.on_node("node-1", "iptables-save")
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(cluster.dir) not in mounts
    assert not [m for m in mounts.splitlines() if "overlay" in m or "kubelet" in m or "containerd" in m]


# ---------------------------------------------------------------------------------------------- install


def test_helm_install_runs_one_ready_pod_per_node(release: RealCluster, release_artefacts: Release) -> None:
    c = release

    def ready() -> dict[str, dict[str, Any]] | None:
        p = w.nftproxy_pods(c)
        return p if len(p) == 2 and all(map(w.pod_ready, p.values())) else None

    pods = eventually(ready, timeout=60, what="pods Ready")
    assert set(pods) == {"node-1", "node-2"}
    for node, pod in pods.items():
        spec = pod["spec"]
        assert spec["hostNetwork"] is True
        assert pod["status"]["podIP"] == c.node_ip(node)
        image = spec["containers"][0]["image"]
        assert image == release_artefacts.image  # the packaged chart's default, imported, never pulled
        # the chart's ServiceAccount, with its projected (bound, expiring) token
        assert spec["serviceAccountName"] == "nftproxy"
        projected = [v["projected"] for v in spec["volumes"] if "projected" in v]
        assert any("serviceAccountToken" in s for p in projected for s in p["sources"])
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    statuses = eventually(lambda: in_sync(c), timeout=60, what="both ProxyStatuses in sync")
    assert set(statuses) == {"node-1", "node-2"}
    table = c.kubectl("get", "proxystatus")
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["NAME", "NODE", "SERVICES", "ENDPOINTS", "IN-SYNC"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["node-1", "node-2"]
    assert all(line.split()[4] == "True" for line in lines[1:])
    for node in ("node-1", "node-2"):
        ruleset = w.nft_table(c, node)
        assert "managed by nftproxy" in ruleset
        assert "10.96.0.1 . tcp . 443" in ruleset  # the `kubernetes` Service
    # the machine's own namespace has no nftproxy table
    assert (
        "nftproxy" not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=False).stdout
    )


def test_installed_release_is_the_packaged_chart_and_the_archived_image(
    release: RealCluster, release_artefacts: Release
) -> None:
    c, rel = release, release_artefacts
    subprocess.run(["sha256sum", "--quiet", "-c", rel.checksums.name], cwd=rel.dir, check=True)
    # the release's chart: helm's record of it is the package's (name, version, appVersion)
    packaged = yaml.safe_load(c.helm("show", "chart", str(rel.chart)))
    assert (packaged["version"], packaged["appVersion"]) == (rel.chart_version, rel.version)
    installed = {r["name"]: r for r in json.loads(c.helm("list", "-n", w.NAMESPACE, "-o", "json"))}[w.RELEASE]
    assert installed["chart"] == f"nftproxy-{rel.chart_version}"
    assert installed["app_version"] == rel.version
    ours = json.loads(c.helm("get", "values", w.RELEASE, "-n", w.NAMESPACE, "-o", "json"))
    assert not {"repository", "tag"} & set(ours.get("image", {})), ours  # the image is the chart's default
    pods = w.nftproxy_pods(c)
    assert set(pods) == {"node-1", "node-2"}
    for node, pod in pods.items():
        assert pod["spec"]["containers"][0]["image"] == f"nftproxy:{rel.version}" == rel.image
        # the container runs the archive's image: on the node, that name's manifest holds the
        # archive's config (the image ID), and the container's image is the name's or that ID
        target = image_targets(c, node)[rel.containerd_ref]
        assert config_digest(c, node, target) == f"sha256:{rel.image_id}"
        image_id = pod["status"]["containerStatuses"][0]["imageID"]
        assert image_id.rsplit("@", 1)[-1] in (target, f"sha256:{rel.image_id}"), image_id
        version = c.kubectl("exec", "-n", w.NAMESPACE, pod["metadata"]["name"], "--", "nftproxy", "--version")
        assert version == f"nftproxy {rel.version}\n"
    statuses = eventually(lambda: in_sync(c), timeout=60, what="both ProxyStatuses in sync")
    assert {s["status"]["version"] for s in statuses.values()} == {rel.version}


def image_targets(c: RealCluster, node: str) -> dict[str, str]:
    """NODE's containerd images: name -> the digest of its manifest (or index)."""
    lines = c.ctr(node, "images", "ls").splitlines()[1:]
    return {fields[0]: fields[2] for fields in map(str.split, lines) if len(fields) >= 3}


def config_digest(c: RealCluster, node: str, digest: str) -> str:
    """The config digest of the manifest DIGEST in NODE's containerd (an index: its one manifest's)."""
    doc = json.loads(c.ctr(node, "content", "get", digest))
    if "manifests" in doc:
        (one,) = doc["manifests"]
        return config_digest(c, node, one["digest"])
    return str(doc["config"]["digest"])


def test_health_probes_pass(release: RealCluster) -> None:
    c = release
    for node, pod in w.nftproxy_pods(c).items():
        container = pod["spec"]["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
        assert w.pod_ready(pod)
        # the probe's endpoint, from outside the node
        code = (
            "import urllib.request; "
            f"r = urllib.request.urlopen('http://{c.node_ip(node)}:10256/healthz', timeout=5); print(r.status)"
        )
        out = subprocess.run(c.client_argv([sys.executable, "-c", code]), capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "200"


def test_helm_test_passes(release: RealCluster) -> None:
    """`helm test`: the chart's selftest pod reaches the nftproxy pods' /healthz through a
    ClusterIP Service (the node's proxy) and finds every node's ProxyStatus InSync: the pod exits 0
    only if both hold, and helm fails otherwise (the hooks are deleted once they succeeded)."""
    out = release.helm("test", w.RELEASE, "-n", w.NAMESPACE, "--timeout", "180s")
    assert re.search(r"TEST SUITE:\s+\S+-selftest", out) and re.search(r"Phase:\s+Succeeded", out), out
    pods = release.kubectl_json("get", "pods", "-n", w.NAMESPACE, "-l", "app.kubernetes.io/component=selftest")
    assert pods["items"] == [], "the succeeded hook is deleted"


# ---------------------------------------------------------------------------------------------- workload


def test_workload_services_answer_from_pods_nodes_and_outside(web: RealCluster) -> None:
    c = web
    pods = web_pods(c)
    assert len(pods) == 2
    # endpoints come from the real EndpointSlice controller
    slices = c.kubectl_json("get", "endpointslices", "-n", "default", "-l", "kubernetes.io/service-name=web")["items"]
    assert slices and all(
        s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "endpointslice-controller.k8s.io"
        for s in slices
    )
    assert {e["addresses"][0] for s in slices for e in s["endpoints"]} == set(pods.values())
    ip = w.cluster_ip(c, "web")
    for node in ("node-1", "node-2"):
        eventually(lambda node=node: served(c, node, ip), timeout=60, what=f"{ip} in {node}'s table")  # type: ignore[misc]
    client_ip = c.kubectl_json("get", "pod", "client")["status"]["podIP"]
    assert client_ip.startswith("10.244.2.")

    # a pod on the other node -> ClusterIP: a web pod answers, and sees the client pod's address
    answers = [w.pod_get(c, "client", f"http://{ip}/") for _ in range(6)]
    assert {a["pod"] for a in answers} <= set(pods)
    assert {a["peer"] for a in answers} == {client_ip}
    # a web pod -> ClusterIP: itself (hairpin, masqueraded) or the other pod on the same bridge
    # (its answer is un-DNATed because bridged traffic goes through the node's ip hooks)
    web_pod = sorted(pods)[0]
    same_node = [w.pod_get(c, web_pod, f"http://{ip}/") for _ in range(8)]
    assert {a["pod"] for a in same_node} <= set(pods)
    for a in same_node:  # masqueraded when it reached itself only, as kube-proxy does
        assert (a["peer"] != pods[web_pod]) == (a["pod"] == web_pod), a
    # a pod -> a NodePort of the node that runs the endpoints
    assert w.pod_get(c, "client", f"http://172.30.0.11:{w.WEB_NODEPORT}/")["pod"] in pods
    # a node -> ClusterIP
    assert w.fetch_from(c.node_net_argv("node-2", []), ip, 80)["pod"] in pods
    # the outside client -> NodePort on either node (externalTrafficPolicy: Cluster)
    outside = c.client_argv([])
    for node_ip in ("172.30.0.11", "172.30.0.12"):
        assert w.fetch_from(outside, node_ip, w.WEB_NODEPORT)["pod"] in pods
    # externalTrafficPolicy: Local: the node with endpoints answers and keeps the client's source;
    # the other one has none and drops it
    local = w.fetch_from(outside, "172.30.0.11", w.WEB_LOCAL_NODEPORT)
    assert local["pod"] in pods
    assert local["peer"] == c.client_ip
    with pytest.raises(subprocess.CalledProcessError) as e:
        w.fetch_from(outside, "172.30.0.12", w.WEB_LOCAL_NODEPORT, timeout=2)
    assert "TimeoutError" in (e.value.stderr or "") or "timed out" in (e.value.stderr or "")


def test_nftproxy_list_in_each_nodes_pod_shows_what_its_kernel_serves(web: RealCluster) -> None:
    """As an operator runs it: `kubectl exec` into the nftproxy pod on a node, `nftproxy list`.
    The web Service's ClusterIP is listed with the web pods as its backends, read from that
    node's kernel tables (the pod's own credentials and network: no kubeconfig, no --netns)."""
    c = web
    ip = w.cluster_ip(c, "web")
    want = set(web_pods(c).values())
    for node, pod in w.nftproxy_pods(c).items():
        argv = ["exec", "-n", w.NAMESPACE, pod["metadata"]["name"], "--", "nftproxy", "list"]

        def listed(argv: list[str] = argv) -> list[dict[str, Any]] | None:
            rows = [
                r
                for r in json.loads(c.kubectl(*argv, "-o", "json"))["frontends"]
                if r["service"] == "default/web" and r["address"] == ip
            ]
            return rows if {b["address"] for r in rows for b in r["backends"]} == want else None

        rows = eventually(listed, timeout=60, what=f"web's ClusterIP and its pods in {node}'s `nftproxy list`")
        assert [(r["type"], r["port"], r["protocol"], r["state"]) for r in rows] == [("ClusterIP", 80, "TCP", "active")]
        text = c.kubectl(*argv)
        assert any("default/web" in line and f"{ip}:80/TCP" in line for line in text.splitlines()), text


def test_workload_rolling_update_under_traffic_fails_no_request(web: RealCluster) -> None:
    c = web
    before = set(web_pods(c))

    def roll() -> None:
        patch = {"spec": {"template": {"metadata": {"annotations": {"roll": "2"}}}}}
        c.kubectl("patch", "deployment", "web", "--type=merge", "-p", json.dumps(patch))
        c.kubectl("rollout", "status", "deployment/web", "--timeout=120s")

    results = w.with_traffic(c, roll)
    after = set(web_pods(c))
    assert len(after) == 2
    assert after.isdisjoint(before)
    for name, r in results.items():
        assert r["failed"] == 0, (name, r)
        assert r["ok"] > 20, (name, r)
    for name in ("outside", "node"):
        # answered by the old pods, then by the new ones
        pods = set(results[name]["pods"])
        assert pods & before and pods & after, (name, results[name]["pods"])


# ---------------------------------------------------------------------------------------------- nftproxy's own update


def _handles(c: RealCluster) -> dict[str, str]:
    return {n.name: w.without_counters(w.nft_table(c, n.name, handles=True)) for n in c.nodes}


@pytest.fixture(scope="module")
def nftproxy_rolled(web: RealCluster, release_artefacts: Release) -> dict[str, Any]:
    """nftproxy's DaemonSet rolled (helm upgrade) under traffic: the pods and tables before, the
    traffic's results."""
    c = web
    old = {node: p["metadata"]["name"] for node, p in w.nftproxy_pods(c).items()}
    before = _handles(c)

    def roll() -> None:
        # the same packaged chart and image (--wait: the DaemonSet rolled out)
        w.helm_upgrade(c, {"podAnnotations.rollout": "2"}, chart=release_artefacts.chart, default_image=True)

        def replaced() -> dict[str, dict[str, Any]] | None:
            pods = w.nftproxy_pods(c)
            new = {n: p for n, p in pods.items() if p["metadata"]["name"] != old.get(n) and w.pod_ready(p)}
            return new if len(new) == 2 else None

        eventually(replaced, timeout=60, what="a new Ready nftproxy pod on each node")
        eventually(lambda: in_sync(c), timeout=60, what="both ProxyStatuses in sync")

    results = w.with_traffic(c, roll, settle=3)
    return {"old_pods": old, "handles_before": before, "results": results}


def test_nftproxy_daemonset_rolling_update_under_traffic(web: RealCluster, nftproxy_rolled: dict[str, Any]) -> None:
    c = web
    old = nftproxy_rolled["old_pods"]
    for name, r in nftproxy_rolled["results"].items():
        assert r["failed"] == 0, (name, r)
        assert r["ok"] > 20, (name, r)
    new = {node: p["metadata"]["name"] for node, p in w.nftproxy_pods(c).items()}
    assert set(new) == set(old) and all(new[n] != old[n] for n in new)
    # the new pods adopted the tables: not one rule or chain recreated (same handles), same contents
    assert _handles(c) == nftproxy_rolled["handles_before"]


def test_restarted_nftproxy_sends_nothing_at_adoption(web: RealCluster, nftproxy_rolled: dict[str, Any]) -> None:
    """The new pods' first sync compared the table with the kernel's and found nothing to send
    (an image without /etc/protocols read "6" for tcp back and re-sent every map element)."""
    c = web
    new = {node: p["metadata"]["name"] for node, p in w.nftproxy_pods(c).items()}
    assert all(new[n] != nftproxy_rolled["old_pods"][n] for n in new)  # restarted pods, not the first ones
    for pod in w.nftproxy_pods(c).values():
        log = c.kubectl("logs", "-n", w.NAMESPACE, pod["metadata"]["name"])
        first = next(line for line in log.splitlines() if "synced (" in line)
        assert "synced (full): 0 ops" in first, first


# ---------------------------------------------------------------------------------------------- identity


def test_a_nodes_token_may_write_only_its_own_proxystatus(web: RealCluster, tmp_path: Path) -> None:
    c = web
    pods = w.nftproxy_pods(c)
    token = c.kubectl(
        "exec", "-n", w.NAMESPACE, pods["node-1"]["metadata"]["name"], "--",
        "cat", "/var/run/secrets/kubernetes.io/serviceaccount/token",
    )  # fmt: skip
    kc = _token_kubeconfig(c, token, tmp_path / "node-1.kubeconfig")
    who = json.loads(c.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc))["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:kube-system:nftproxy"
    assert who["extra"]["authentication.kubernetes.io/node-name"] == ["node-1"]
    label = '{"metadata":{"labels":{"nftproxy-e2e":"touched"}}}'
    # node-1's pod token: its own ProxyStatus yes (object and status), node-2's no
    c.kubectl("patch", "proxystatus", "node-1", "--type=merge", "-p", label, kubeconfig=kc)
    with pytest.raises(RuntimeError) as denied:
        c.kubectl("patch", "proxystatus", "node-2", "--type=merge", "-p", label, kubeconfig=kc)
    assert "may write only ProxyStatus node-1, not node-2" in str(denied.value)
    # a token of the same ServiceAccount bound to no node (e.g. stolen from a Secret) may write none
    unbound = c.kubectl("create", "token", "nftproxy", "-n", w.NAMESPACE).strip()
    kc2 = _token_kubeconfig(c, unbound, tmp_path / "unbound.kubeconfig")
    with pytest.raises(RuntimeError) as denied:
        c.kubectl("patch", "proxystatus", "node-1", "--type=merge", "-p", label, kubeconfig=kc2)
    assert "bound to no node" in str(denied.value)
    # ... but reads (RBAC) still work for both
    assert (
        c.kubectl("get", "proxystatus", "node-2", "-o", "name", kubeconfig=kc2).strip()
        == "proxystatus.nftproxy.io/node-2"
    )
    assert c.kubectl_json("get", "proxystatus", "node-2")["metadata"].get("labels", {}).get("nftproxy-e2e") is None


def _token_kubeconfig(c: RealCluster, token: str, path: Path) -> Path:
    admin = json.loads(c.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "t", "user": {"token": token.strip()}}],
        "contexts": [{"name": "t", "context": {"cluster": cluster["name"], "user": "t"}}],
        "current-context": "t",
    }
    path.write_text(json.dumps(config))
    return path


# ---------------------------------------------------------------------------------------------- uninstall


def test_helm_uninstall_removes_each_nodes_tables(web: RealCluster) -> None:
    """Each pod, stopped by the uninstall, finds its DaemonSet gone (its watch saw the deletion,
    before helm deleted the Role and ServiceAccount): it is leaving its node for good. With no
    other proxy on the node, it waits its bounded 15 s, then removes its tables: no stale rules
    are left to intercept Service traffic."""
    c = web
    c.helm("uninstall", w.RELEASE, "-n", w.NAMESPACE, "--wait", "--timeout", "120s")

    def gone() -> bool | None:  # terminating pods too: each removes its tables before it exits
        pods = c.kubectl_json("get", "pods", "-n", w.NAMESPACE, "-l", "app.kubernetes.io/name=nftproxy")["items"]
        return not pods or None

    eventually(gone, timeout=90, what="the nftproxy pods gone")
    for n in c.nodes:
        tables = c.on_node(n.name, "nft", "list", "tables")
        assert "nftproxy" not in tables, (n.name, tables)
    # nothing left for `nftproxy cleanup` to do
    assert "removed nothing" in c.on_node("node-1", sys.executable, "-m", "nftproxy", "cleanup")
