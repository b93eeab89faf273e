"""Our one API client (operator/kube.py) and credential loader (operator/credentials.py) against a
real kube-apiserver: the apiserver's errors arrive as one type, and a kubeconfig with an exec
credential plugin (as EKS and GKE kubeconfigs have) works for the CLI and for `nftproxy run`,
kopf's watches included (kopf logs in with the same credentials)."""

from __future__ import annotations

import gzip
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nftproxy.operator import credentials, kube
from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, bare_netns
from tests.support import kubeconfigs
from tests.support.run import run_nftproxy

pytestmark = [pytest.mark.k8s]


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _exec_kubeconfig(cp: ControlPlane, tmp_path: Path, role: str) -> Path:
    """A service account bound to ``role`` (a ClusterRole); a kubeconfig whose user is an exec
    plugin printing that account's token (no token, no certificate in the file)."""
    name = _unique("ap-exec")
    cp.kubectl("create", "serviceaccount", name, "-n", "default")
    cp.kubectl("create", "clusterrolebinding", name, f"--clusterrole={role}", f"--serviceaccount=default:{name}")
    token = cp.kubectl("create", "token", name, "-n", "default", "--duration=1h").stdout.strip()
    user = kubeconfigs.exec_plugin(tmp_path, token)
    path = tmp_path / "exec.kubeconfig"
    kubeconfigs.write(path, {"server": cp.server, "certificate-authority": str(cp.ca_file)}, user)
    return path


def test_the_apiservers_errors_are_one_type_and_a_404_reads_as_absent(control_plane: ControlPlane) -> None:
    cp = control_plane
    api = kube.connect(str(cp.kubeconfig))  # the admin kubeconfig: a client certificate, read by us
    assert api.credentials.renew is None
    ns = _unique("ap-errors")
    try:
        assert api.read(f"/api/v1/namespaces/{ns}/services/web") is None
        assert api.read(kube.proxy_status_path("no-such-node")) is None  # a CRD not installed here: 404 too
        with pytest.raises(kube.ApiError) as missing:
            api.request("GET", f"/api/v1/namespaces/{ns}")
        assert missing.value.not_found and missing.value.status == 404
        api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        with pytest.raises(kube.ApiError) as taken:
            api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        assert (taken.value.status, taken.value.not_found) == (409, False)
        assert taken.value.message == f'namespaces "{ns}" already exists'
        with pytest.raises(kube.ApiError) as invalid:
            api.request("POST", f"/api/v1/namespaces/{ns}/services", body=k.service("web", namespace=ns))
        assert invalid.value.status == 422 and "spec.ports: Required value" in invalid.value.message
        web = k.service("web", ["10.96.77.1"], [k.port(80, "http")], namespace=ns)
        created = api.request("POST", f"/api/v1/namespaces/{ns}/services", body=web)
        got = api.read(f"/api/v1/namespaces/{ns}/services/web")
        assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    finally:
        api.close()
        cp.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def test_forbidden_is_the_same_error_with_the_apiservers_reason(control_plane: ControlPlane, tmp_path: Path) -> None:
    """An exec plugin's token for an account RBAC grants nothing: 403, as an ApiError."""
    kc = _exec_kubeconfig(control_plane, tmp_path, "system:discovery")
    api = kube.connect(str(kc))
    assert api.credentials.renew is not None  # read by the Kubernetes client's loader
    with pytest.raises(kube.ApiError) as denied:
        api.read("/api/v1/nodes/x")
    assert denied.value.status == 403 and "cannot get resource" in denied.value.message
    assert kube.server_version(api)["major"] == "1"  # authenticated: /version is allowed
    assert kubeconfigs.runs(tmp_path) == 1


@pytest.mark.netns
def _web_service(cp: ControlPlane, prefix: str, cluster_ip: str, endpoint: str) -> str:
    """A namespace holding Service `web` (port 80) and its one EndpointSlice; returns the namespace."""
    ns = _unique(prefix)
    cp.kubectl("create", "namespace", ns)
    objs = [
        k.service("web", [cluster_ip], [k.port(80, "http")], namespace=ns),
        k.endpoint_slice("web-1", "web", [k.endpoint(endpoint)], [k.port(8080, "http")], namespace=ns),
    ]
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    return ns


def test_an_exec_plugin_kubeconfig_works_for_explain(control_plane: ControlPlane, tmp_path: Path) -> None:
    """`nftproxy explain --kubeconfig` with an exec plugin: the plugin runs, its token reads the
    Service and its EndpointSlices (the kernel of an empty namespace holds none of what they
    compile to: every element is listed as missing)."""
    cp = control_plane
    ns = _web_service(cp, "ap-explain", "10.96.77.10", "10.244.7.2")
    kc = _exec_kubeconfig(cp, tmp_path, "cluster-admin")
    try:
        with bare_netns("ap-explain") as netns:
            r = run_nftproxy("explain", f"{ns}/web", "--netns", netns, "--kubeconfig", str(kc), "-o", "json")
        assert r.returncode == 0, r.stderr
        check = json.loads(r.stdout)["api"]
        assert not any("does not exist" in x for x in check["reasons"]), check
        missing = " ".join(check["missing"])
        assert "10.96.77.10" in missing and "10.244.7.2" in missing, check
        assert kubeconfigs.runs(tmp_path) >= 1
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


@pytest.fixture
def lab_cluster(control_plane: ControlPlane, tmp_path: Path) -> Iterator[LocalCluster]:
    with NetLab("vf") as lab:
        cl = LocalCluster(control_plane, lab, tmp_path)
        try:
            yield cl
        finally:
            cl.close()


@pytest.mark.netns
def test_nftproxy_run_with_an_exec_plugin_kubeconfig_lists_watches_and_reports(
    lab_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The first lists and the Service watch (our client), kopf's Node watch (kopf's login from
    our credentials) and the ProxyStatus (our client again), all with the plugin's token."""
    cl = lab_cluster
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    kc = _exec_kubeconfig(cl.cp, plugin_dir, "cluster-admin")
    node = cl.add_node("ap-exec-node", 1)
    ns = cl.namespace(_unique("ap-run"))
    cl.apply(k.service("before", ["10.96.78.1"], [k.port(80)], namespace=ns))
    cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "0.5s", kubeconfig=kc)

    def table() -> str:
        r = subprocess.run(
            ["ip", "netns", "exec", node.netns, "nft", "list", "table", "ip", "nftproxy"],
            capture_output=True,
            text=True,
            check=False,
        )
        return r.stdout

    eventually(lambda: "10.96.78.1" in table(), timeout=60, what="the listed Service in the kernel")
    cl.apply(k.service("after", ["10.96.78.2"], [k.port(80)], namespace=ns))  # only the watch sees it
    eventually(lambda: "10.96.78.2" in table(), timeout=60, what="the watched Service in the kernel")

    def reported() -> dict[str, object] | None:
        return cl.proxy_status(node).get("status")

    status = eventually(reported, timeout=60, what="the ProxyStatus written")
    assert "services" in status
    assert kubeconfigs.runs(plugin_dir) >= 1
    assert credentials.load(str(kc)).renew is not None  # the Kubernetes client's loader read it


def test_explain_in_the_pod_compares_with_the_api_through_the_service_account(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nftproxy explain --api` inside the nftproxy pod: no kubeconfig, the pod's service account
    (its token and CA files, KUBERNETES_SERVICE_HOST/PORT) reads the Service and its slices."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    from nftproxy.cli import main  # noqa: PLC0415

    cp = control_plane
    ns = _web_service(cp, "ap-incluster", "10.96.77.20", "10.244.7.3")
    name = _unique("ap-sa")
    cp.kubectl("create", "serviceaccount", name, "-n", "default")
    cp.kubectl("create", "clusterrolebinding", name, "--clusterrole=cluster-admin", f"--serviceaccount=default:{name}")
    sa = f"system:serviceaccount:default:{name}"
    eventually(  # the binding reaches the apiserver's authorizer
        lambda: (
            cp.kubectl("auth", "can-i", "get", "services", "-n", ns, "--as", sa, check=False).stdout.strip() == "yes"
        ),
        what="the service account may read",
    )
    (tmp_path / "token").write_text(cp.kubectl("create", "token", name, "-n", "default").stdout.strip())
    monkeypatch.setattr(credentials, "TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setattr(credentials, "CA_FILE", str(cp.ca_file))
    server = urlsplit(cp.server)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    try:
        with bare_netns("ap-incluster") as netns:
            assert main(["explain", f"{ns}/web", "--netns", netns, "--api", "-o", "json"]) == 0
        check = json.loads(capsys.readouterr().out)["api"]
        assert not any("does not exist" in x for x in check["reasons"]), check
        missing = " ".join(check["missing"])
        assert "10.96.77.20" in missing and "10.244.7.3" in missing, check
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def test_a_large_list_arrives_gzipped_and_reads_the_same(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As client-go, our client asks for gzip: the apiserver compresses an answer over 128 KB (a
    list of a few thousand objects) to a fraction; what the client returns is the same."""
    api = kube.connect(str(control_plane.kubeconfig))
    ns = _unique("ap-gzip")
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    received: list[int] = []  # the compressed bodies' sizes, as they came off the wire
    decompress = gzip.decompress

    def counted(raw: bytes) -> bytes:
        received.append(len(raw))
        return decompress(raw)

    monkeypatch.setattr(gzip, "decompress", counted)
    try:
        for i in range(40):  # 40 x ~4 KB: ~170 KB as JSON
            body = {"metadata": {"name": f"cm-{i}"}, "data": {"v": "nftproxy " * 450}}
            api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", body=body)
        assert received == []  # small answers come as they are
        listed = api.request("GET", f"/api/v1/namespaces/{ns}/configmaps")
        assert sorted(i["metadata"]["name"] for i in listed["items"]) == sorted(f"cm-{i}" for i in range(40))
        assert all(i["data"]["v"] == "nftproxy " * 450 for i in listed["items"])
        size = len(json.dumps(listed))
        assert size > 128 * 1024
        assert len(received) == 1 and received[0] < size / 5, (received, size)
    finally:
        api.request("DELETE", f"/api/v1/namespaces/{ns}")
