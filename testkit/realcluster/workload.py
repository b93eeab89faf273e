"""What runs on the real cluster: the chart (helm), an echo Deployment with its Services, a client
pod, and continuous traffic from a node, the outside client or a pod."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testkit.k8s import objects
from testkit.k8s.controlplane import find_binary
from testkit.realcluster.cluster import ROOT, RealCluster
from testkit.realcluster.node import CLUSTER_CIDRS

CHART = ROOT / "charts" / "nftproxy"
RELEASE = "nftproxy"
NAMESPACE = "kube-system"
WEB_NODEPORT = 30080
WEB_LOCAL_NODEPORT = 30081


def chart_values(
    cluster: RealCluster,
    extra: Mapping[str, str | bool] | None = None,
    image: str | None = None,
    *,
    default_image: bool = False,
) -> list[str]:
    """The values for this cluster; EXTRA: strings (--set-string) or booleans; IMAGE: another
    nftproxy image than the cluster's own build; DEFAULT_IMAGE: the chart's own default image (a
    packaged release's, imported into the nodes), no image.repository/tag."""
    values: dict[str, str] = {}
    if not default_image:
        repo, tag = (image or cluster.images["nftproxy"]).rsplit(":", 1)
        values |= {"image.repository": repo, "image.tag": tag}
    values |= {
        "image.pullPolicy": "Never",  # no registry: the image was imported into each containerd
        # nftproxy is the only Service proxy: it reaches the API without one (the forwarder on
        # each node's 127.0.0.1).
        "apiServer.host": "127.0.0.1",
        "apiServer.port": str(cluster.apiserver_port),
        "clusterCIDR": "{" + ",".join(CLUSTER_CIDRS) + "}",
        "statusPeriod": "1s",
    }
    out: list[str] = []
    for k, value in values.items():
        out += ["--set", f"{k}={value}"]
    for k, v in (extra or {}).items():
        out += ["--set", f"{k}={str(v).lower()}"] if isinstance(v, bool) else ["--set-string", f"{k}={v}"]
    return out


def helm_install(cluster: RealCluster, values: Mapping[str, str | bool] | None = None) -> str:
    """`helm upgrade --install` of the chart with the local image (waits for the pods)."""
    return helm_upgrade(cluster, values, "--install")


def helm_upgrade(
    cluster: RealCluster,
    values: Mapping[str, str | bool] | None = None,
    *flags: str,
    chart: Path = CHART,
    image: str | None = None,
    default_image: bool = False,
) -> str:
    """VALUES: chart values (dotted keys) on top of chart_values()'s; CHART: another chart directory
    (another commit's) or a packaged chart (.tgz); IMAGE: another nftproxy image (imported into the
    nodes); DEFAULT_IMAGE: the chart's default image (see chart_values)."""
    argv = [
        "upgrade", *flags, RELEASE, str(chart), "-n", NAMESPACE,
        *chart_values(cluster, values, image, default_image=default_image),
    ]  # fmt: skip
    out = cluster.helm(*argv, "--wait", "--timeout", "180s")
    _daemonset_rolled_out(cluster)
    return out


def helm_rollback(cluster: RealCluster, revision: int) -> str:
    """`helm rollback` of the release to REVISION (waits for the pods)."""
    out = cluster.helm("rollback", RELEASE, str(revision), "-n", NAMESPACE, "--wait", "--timeout", "180s")
    _daemonset_rolled_out(cluster)
    return out


def helm_revision(cluster: RealCluster) -> int:
    """The release's current revision."""
    return int(json.loads(cluster.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))["version"])


def _daemonset_rolled_out(cluster: RealCluster) -> None:
    # helm's --wait lets a DaemonSet be maxUnavailable pods short: wait for every one
    cluster.kubectl("rollout", "status", "-n", NAMESPACE, "daemonset/nftproxy", "--timeout=180s")


def nftproxy_pods(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    """node name -> its nftproxy pod (the running, not terminating one)."""
    pods = cluster.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=nftproxy")["items"]
    return {
        p["spec"]["nodeName"]: p for p in pods if "nodeName" in p["spec"] and not p["metadata"].get("deletionTimestamp")
    }


def condition(obj: dict[str, Any], kind: str) -> bool:
    """Is condition KIND of OBJ's status True?"""
    return any(c["type"] == kind and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def pod_ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready")


def proxy_statuses(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.kubectl_json("get", "proxystatus")["items"]}


def nft_table(cluster: RealCluster, node: str, *, handles: bool = False) -> str:
    return cluster.on_node(node, "nft", *(["-a"] if handles else []), "list", "table", "ip", "nftproxy")


def table_layout(cluster: RealCluster, node: str) -> int | None:
    """The layout number in the comment of NODE's `ip nftproxy` table (None: no such comment)."""
    m = re.search(r'comment "nftproxy layout (\d+) ', nft_table(cluster, node))
    return int(m.group(1)) if m else None


def without_counters(ruleset: str) -> str:
    return re.sub(r"counter packets \d+ bytes \d+", "counter", ruleset)


def echo_container(**extra: Any) -> dict[str, Any]:
    """The echo server's container (the image hack/images.sh builds), Ready once it answers on
    port 8080 (named http); ``extra``: more fields of the container."""
    return {
        "name": "echo",
        "image": "localhost/nftproxy-echo:1",
        "imagePullPolicy": "Never",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
        **extra,
    }


def web_manifests(replicas: int = 2, node: str = "node-1", roll: str = "1") -> str:
    """The echo Deployment (on NODE) behind a NodePort Service and an externalTrafficPolicy: Local
    one, and a client pod on the other node. Pods stop serving 3 s after they are told to stop
    (preStop), as a real server drains: the proxy has that long to stop sending them new ones."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "default"},
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": {"app": "web"}},
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                        "template": {
                            "metadata": {"labels": {"app": "web"}, "annotations": {"roll": roll}},
                            "spec": {
                                "nodeSelector": {"kubernetes.io/hostname": node},
                                "terminationGracePeriodSeconds": 10,
                                "containers": [
                                    echo_container(lifecycle={"preStop": {"exec": {"command": ["sleep", "3"]}}})
                                ],
                            },
                        },
                    },
                },
                _service("web", WEB_NODEPORT, "Cluster"),
                _service("web-local", WEB_LOCAL_NODEPORT, "Local"),
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "client", "namespace": "default"},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "node-2" if node == "node-1" else "node-1"},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "c",
                                "image": "localhost/nftproxy-echo:1",
                                "imagePullPolicy": "Never",
                                # a PID 1 that reaps what `kubectl exec` leaves behind
                                "command": ["/bin/init"],
                            }
                        ],
                    },
                },
            ],
        }
    )


def _service(name: str, node_port: int, policy: str) -> dict[str, Any]:
    ports = [objects.port(80, node_port=node_port, target="http")]
    return objects.service(name, (), ports, type="NodePort", externalTrafficPolicy=policy, selector={"app": "web"})


def cluster_ip(cluster: RealCluster, service: str) -> str:
    return str(cluster.kubectl_json("get", "service", service, "-n", "default")["spec"]["clusterIP"])


def fetch_from(prefix: Sequence[str], host: str, port: int, timeout: float = 3.0) -> dict[str, str]:
    """One request from a namespace (PREFIX: e.g. cluster.client_argv([])): the echo's answer."""
    code = (
        "import json; from testkit.realcluster.traffic import fetch; "
        f"print(json.dumps(fetch({host!r}, {port}, {timeout})))"
    )
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30, cwd=ROOT
    ).stdout
    answer: dict[str, str] = json.loads(out)
    return answer


def pod_get(cluster: RealCluster, pod: str, url: str, timeout: float = 5.0) -> dict[str, str]:
    """One request from a pod (busybox wget inside it, through kubectl exec)."""
    out = cluster.kubectl("exec", pod, "--", "timeout", str(int(timeout)), "wget", "-qO-", url, timeout=timeout + 30)
    answer: dict[str, str] = json.loads(out)
    return answer


# A busybox loop in a pod: new connections all the time, until the file STOP exists.
POD_LOOP = (
    "rm -f {stop}; ok=0; failed=0; "
    "while [ ! -e {stop} ]; do "
    "if timeout 3 wget -qO- {url} >/dev/null 2>&1; then ok=$((ok+1)); else failed=$((failed+1)); fi; usleep 20000; "
    "done; rm -f {stop}; "
    'echo "{{\\"ok\\": $ok, \\"failed\\": $failed}}"'
)


class Traffic:
    """Continuous new connections to URLs from inside a namespace (argv prefix), in the background."""

    def __init__(self, prefix: Sequence[str], urls: Sequence[str], interval: float = 0.02) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [*prefix, sys.executable, "-m", "testkit.realcluster.traffic", "--interval", str(interval), *urls]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            self.proc.kill()
            raise RuntimeError(f"traffic client did not start: {line!r}")

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        result: dict[str, Any] = json.loads(out)
        return result

    def __del__(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


class PodTraffic:
    """The same from a pod: a busybox loop run through kubectl exec, until stop()."""

    def __init__(self, cluster: RealCluster, pod: str, url: str) -> None:
        self.cluster = cluster
        self.pod = pod
        self.stop_file = f"/tmp/traffic-stop-{os.getpid()}-{id(self)}"
        script = POD_LOOP.format(stop=self.stop_file, url=url)
        kubectl = [str(find_binary("kubectl")), f"--kubeconfig={cluster.kubeconfig}"]
        self.proc = subprocess.Popen(
            [*kubectl, "exec", pod, "--", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.cluster.kubectl("exec", self.pod, "--", "sh", "-c", f": > {self.stop_file}")
        out, err = self.proc.communicate(timeout=60)
        if self.proc.returncode != 0:
            raise RuntimeError(f"pod traffic failed ({self.proc.returncode}): {err.strip()}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def __del__(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def with_traffic(cluster: RealCluster, action: Callable[[], object], settle: float = 6.0) -> dict[str, dict[str, Any]]:
    """Run ACTION under continuous new connections to the web Services: from the outside client
    (the NodePort of both nodes), from node-2 (ClusterIP) and from the client pod (ClusterIP).
    Traffic starts 2 s before and stops SETTLE seconds after ACTION returned."""
    ip = cluster_ip(cluster, "web")
    clients: dict[str, Traffic | PodTraffic] = {}
    try:
        clients["outside"] = Traffic(
            cluster.client_argv([]), [f"http://{n.ip}:{WEB_NODEPORT}/" for n in reversed(cluster.nodes)]
        )
        clients["node"] = Traffic(cluster.node_net_argv("node-2", []), [f"http://{ip}/"])
        clients["pod"] = PodTraffic(cluster, "client", f"http://{ip}/")
        time.sleep(2)
        action()
        time.sleep(settle)
    finally:
        results = {name: c.stop() for name, c in clients.items()}
    return results
