"""The test control plane itself: a real apiserver, RBAC enforced, restartable, leaves nothing."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from kubernetes import client, config  # its kubeconfig loader reads exec-plugin kubeconfigs for nftproxy

from testkit import process
from testkit.k8s.controlplane import (
    SERVICE_CLUSTER_IP_RANGE,
    ControlPlane,
    ControlPlaneError,
    find_binary,
)

pytestmark = pytest.mark.k8s


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.2)


def _processes_mentioning(text: str) -> list[tuple[int, str]]:
    """(pid, cmdline) of every live process whose command line contains TEXT."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        cmdline = " ".join(process.cmdline(proc.pid))
        if text in cmdline:
            found.append((proc.pid, cmdline))
    return found


SERVICE_YAML = """\
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {ns}
  labels: {{app: web}}
spec:
  selector: {{app: web}}
  ports:
  - name: http
    port: 80
    targetPort: 8080
    protocol: TCP
"""


def test_api_answers_and_stores_objects(control_plane: ControlPlane) -> None:
    cp = control_plane
    assert cp.server.startswith("https://127.0.0.1:")
    assert cp.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(cp.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["major"] == "1"

    ns = _unique("cp-api")
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("apply", "-f", "-", input=SERVICE_YAML.format(ns=ns))
    svc = json.loads(cp.kubectl("get", "service", "web", "-n", ns, "-o", "json").stdout)
    assert svc["metadata"]["labels"] == {"app": "web"}
    assert svc["spec"]["ports"][0]["port"] == 80
    assert svc["spec"]["ports"][0]["targetPort"] == 8080
    # The apiserver's own allocator hands out a ClusterIP from the configured range.
    cluster_ip = ipaddress.ip_address(svc["spec"]["clusterIP"])
    assert any(cluster_ip in ipaddress.ip_network(r) for r in SERVICE_CLUSTER_IP_RANGE.split(","))
    kubernetes = json.loads(cp.kubectl("get", "service", "kubernetes", "-o", "json").stdout)
    assert kubernetes["spec"]["clusterIP"] == "10.96.0.1"


def test_python_client_reads_admin_kubeconfig(control_plane: ControlPlane) -> None:
    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(control_plane.kubeconfig)
    )
    namespaces = client.CoreV1Api(api_client).list_namespace().items
    names = {ns.metadata.name for ns in namespaces if ns.metadata}
    assert {"default", "kube-system"} <= names


def test_rbac_is_enforced_for_service_account_tokens(control_plane: ControlPlane, tmp_path: Path) -> None:
    cp = control_plane
    ns = _unique("cp-rbac")
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "secret", "generic", "s3cret", "-n", ns, "--from-literal=k=v")
    cp.kubectl("create", "serviceaccount", "reader", "-n", ns)
    token = cp.kubectl("create", "token", "reader", "-n", ns, "--duration=10m").stdout.strip()
    kc = cp.token_kubeconfig(token, tmp_path / "reader.kubeconfig")

    # The token authenticates (a signed service-account JWT) ...
    who = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc).stdout)
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:reader"

    # ... but RBAC grants it nothing.
    can = cp.kubectl("auth", "can-i", "list", "secrets", "-n", ns, kubeconfig=kc, check=False)
    assert (can.returncode, can.stdout.strip()) == (1, "no")
    denied = cp.kubectl("get", "secrets", "-n", ns, kubeconfig=kc, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower(), denied.stderr

    cp.kubectl("create", "role", "secret-reader", "-n", ns, "--verb=get,list", "--resource=secrets")
    cp.kubectl(
        "create",
        "rolebinding",
        "reader-secrets",
        "-n",
        ns,
        "--role=secret-reader",
        f"--serviceaccount={ns}:reader",
    )

    def allowed() -> bool:
        res = cp.kubectl("auth", "can-i", "list", "secrets", "-n", ns, kubeconfig=kc, check=False)
        return res.stdout.strip() == "yes"

    _eventually(allowed)
    listed = cp.kubectl("get", "secrets", "-n", ns, "-o", "name", kubeconfig=kc)
    assert "secret/s3cret" in listed.stdout.split()
    # Only in that namespace, and only what the Role says.
    other = cp.kubectl("auth", "can-i", "list", "secrets", "-n", "default", kubeconfig=kc, check=False)
    assert other.stdout.strip() == "no"
    delete = cp.kubectl("auth", "can-i", "delete", "secrets", "-n", ns, kubeconfig=kc, check=False)
    assert delete.stdout.strip() == "no"


def test_apiserver_restart_keeps_data(control_plane: ControlPlane) -> None:
    cp = control_plane
    ns = _unique("cp-restart")
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "configmap", "keep", "-n", ns, "--from-literal=answer=42")
    server = cp.server

    cp.stop_apiserver()
    assert not cp.apiserver_running()
    down = cp.kubectl("get", "namespace", ns, "--request-timeout=3s", check=False)
    assert down.returncode != 0

    cp.start_apiserver()
    assert cp.server == server
    data = json.loads(cp.kubectl("get", "configmap", "keep", "-n", ns, "-o", "json").stdout)
    assert data["data"] == {"answer": "42"}


def test_stop_leaves_no_process() -> None:
    with ControlPlane() as cp:
        workdir = cp.workdir
        etcd_dir = cp.etcd_data_dir
        assert etcd_dir is not None and str(etcd_dir).startswith("/dev/shm/"), "etcd's data on tmpfs"
        pids = cp.pids
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert cp.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
        assert len(_processes_mentioning(str(workdir))) == 1  # kube-apiserver (its certs)
        assert len(_processes_mentioning(str(etcd_dir))) == 1  # etcd
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} still there"
    assert _processes_mentioning(str(workdir)) == [] and _processes_mentioning(str(etcd_dir)) == []
    assert not workdir.exists() and not etcd_dir.exists()


def test_stop_after_failed_start_leaves_no_process(tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp", extra_apiserver_args=["--no-such-flag"])
    with pytest.raises(ControlPlaneError, match="kube-apiserver exited during startup"):
        cp.start()
    assert _processes_mentioning(str(tmp_path / "cp")) == []


def test_cli_up_and_down(tmp_path: Path) -> None:
    d = tmp_path / "demo"
    cli = [sys.executable, "-m", "testkit.k8s.controlplane"]
    up = subprocess.run([*cli, "up", "--dir", str(d)], capture_output=True, text=True, timeout=180, check=False)
    try:
        assert up.returncode == 0, up.stderr
        assert (d / "kubeconfig").is_file()
        pids = json.loads((d / "pids.json").read_text())
        assert set(pids) == {"etcd", "kube-apiserver"}
        # The CLI process is gone, the control plane is still serving.
        status = subprocess.run(
            [*cli, "status", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert status.returncode == 0, status.stdout
        # A second `up` is a no-op.
        again = subprocess.run([*cli, "up", "--dir", str(d)], capture_output=True, text=True, timeout=60, check=False)
        assert again.returncode == 0 and "already up" in again.stdout
        kubectl = [str(find_binary("kubectl")), f"--kubeconfig={d / 'kubeconfig'}"]
        res = subprocess.run(
            [*kubectl, "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert res.stdout.strip() == "ok"
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(d)], capture_output=True, text=True, timeout=60, check=False)
    assert down.returncode == 0, down.stderr
    assert not d.exists()
    assert _processes_mentioning(str(d)) == []


def test_our_initial_list_reads_every_object_page_by_page(control_plane: ControlPlane) -> None:
    """nftproxy's own initial list (``kube.Client.pages``) follows the API's continue tokens: a list
    longer than one page arrives whole, in pages (parsed one at a time, not all at once)."""
    from nftproxy.operator import kube  # noqa: PLC0415

    cp = control_plane
    ns = _unique("pages")
    cp.kubectl("create", "namespace", ns)
    docs = [SERVICE_YAML.format(ns=ns).replace("name: web", f"name: web{i}") for i in range(5)]
    cp.kubectl("apply", "-f", "-", input="---\n".join(docs))
    api = kube.connect(str(cp.kubeconfig))
    versions: list[str] = []
    pages = list(api.pages(f"/api/v1/namespaces/{ns}/services", limit=2, on_version=versions.append))
    assert [len(p) for p in pages] == [2, 2, 1]
    assert sorted(s["metadata"]["name"] for p in pages for s in p) == [f"web{i}" for i in range(5)]
    assert len(versions) == 1 and versions[0].isdigit(), versions  # the list's snapshot, once
    cp.kubectl("delete", "namespace", ns, "--wait=false")
