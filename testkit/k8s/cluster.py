"""A local cluster for e2e tests and the demo: a real control plane, node namespaces (netlab),
Node objects for them, and one `nftproxy run --netns` per node (the operator talks to the API on
loopback from where it runs and programs, and serves /healthz in, its node's namespace)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, Node

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "charts" / "nftproxy" / "crds" / "proxystatus.yaml"
T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.2, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last: {last!r}")


class LocalCluster:
    def __init__(self, cp: ControlPlane, lab: NetLab, logdir: Path) -> None:
        self.cp = cp
        self.lab = lab
        self.logdir = logdir
        self.proxies: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        cp.kubectl("apply", "-f", str(CRD))
        cp.kubectl("wait", "--for=condition=Established", "crd/proxystatuses.nftproxy.io", "--timeout=30s")

    def add_node(self, name: str, index: int, zone: str | None = None) -> Node:
        node = self.lab.add_node(name, index)
        self.register_node(node, zone)
        return node

    def register_node(self, node: Node, zone: str | None = None) -> None:
        """The Node object of a lab node (``add_node`` does both; a test may start a proxy first)."""
        name = node.name
        labels = {"kubernetes.io/hostname": name}
        if zone:
            labels["topology.kubernetes.io/zone"] = zone
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": node.ipv4},
                        {"type": "InternalIP", "address": node.ipv6},
                        {"type": "Hostname", "address": name},
                    ]
                },
            }
        )

    def start_proxy(
        self,
        node: Node,
        *flags: str,
        healthz_port: int = 10256,
        metrics_port: int = 10249,
        kubeconfig: Path | None = None,
        module: str = "nftproxy",
    ) -> None:
        """``module``: what ``python -m`` runs (a test's wrapper of the command, e.g. one that
        injects a fault)."""
        log = (self.logdir / f"nftproxy-{node.name}.log").open("ab")
        argv = [
            sys.executable, "-m", module, "run",
            "--node-name", node.name,
            "--kubeconfig", str(kubeconfig or self.cp.kubeconfig),
            "--netns", node.netns,
            "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48",
            "--healthz-bind-address", f"{node.ipv4}:{healthz_port}",
            "--metrics-bind-address", f"{node.ipv4}:{metrics_port}",
            *flags,
        ]  # fmt: skip
        # Runs here (API on loopback), programs and serves in the node's namespace (--netns).
        self.proxies[node.name] = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        self.ports[node.name] = healthz_port

    def close(self) -> None:
        for name in list(self.proxies):
            proc = self.proxies.pop(name)
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_proxy(self, node: Node, sig: int = signal.SIGTERM) -> int:
        proc = self.proxies.pop(node.name)
        proc.send_signal(sig)
        return proc.wait(timeout=30)

    def proxy_log(self, node: Node) -> str:
        return (self.logdir / f"nftproxy-{node.name}.log").read_text(errors="replace")

    # -- API helpers ---------------------------------------------------------------------------
    def apply(self, *objects: Mapping[str, Any]) -> None:
        self.cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        args = ["delete", kind, name, "--wait=false"]
        if namespace:
            args += ["-n", namespace]
        self.cp.kubectl(*args)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        args = ["get", kind, name, "-o", "json"]
        if namespace:
            args += ["-n", namespace]
        return dict(json.loads(self.cp.kubectl(*args).stdout))

    def namespace(self, name: str) -> str:
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    def proxy_status(self, node: Node) -> dict[str, Any]:
        r = self.cp.kubectl("get", "proxystatus", node.name, "-o", "json", check=False)
        return dict(json.loads(r.stdout)) if r.returncode == 0 else {}

    def proxy_events(self, namespace: str) -> list[dict[str, Any]]:
        """The Events nftproxy wrote in a namespace. Only ours: the apiserver's ClusterIP repair
        loop may report on the same Services (ClusterIPNotAllocated, seen in CI)."""
        items = json.loads(self.cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        return [e for e in items if e.get("reportingComponent") == "nftproxy"]

    def http_get(self, node: Node, port: int, path: str) -> tuple[int, str]:
        """GET from inside the node's namespace (where the operator serves)."""
        code = (
            "import sys,urllib.request,urllib.error\n"
            f"try:\n r=urllib.request.urlopen('http://{node.ipv4}:{port}{path}',timeout=5)\n"
            " print(r.status); print(r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n print(e.code); print(e.read().decode())\n"
        )
        out = self.lab.exec(node, sys.executable, "-c", code).stdout
        status, _, body = out.partition("\n")
        return int(status), body
