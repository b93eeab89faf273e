"""What every cluster runs besides the proxy: cluster DNS (CoreDNS behind `kube-system/kube-dns`).

CoreDNS is built here from the Go module proxy (hack/e2e-tools.sh) into the image
``images.json["coredns"]`` (hack/images.sh), and deployed as kubeadm deploys it: two replicas in
kube-system, the `kube-dns` Service at 10.96.0.10 (53/UDP, 53/TCP), the standard `kubernetes`
plugin Corefile for cluster.local, RBAC to list and watch what it serves, lameduck on shutdown.
Its in-cluster config reaches the API through 10.96.0.1, that is through the Service proxy: it is
installed after the proxy. No `forward` plugin: names outside cluster.local fail at once and
nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from testkit.k8s.controlplane import find_binary
from testkit.realcluster.cluster import ClusterError, RealCluster
from testkit.realcluster.node import CLUSTER_DNS_IP, CLUSTER_DOMAIN

DNS_NAMESPACE = "kube-system"
DNS_DEPLOYMENT = "coredns"
DNS_LABELS = {"k8s-app": "kube-dns"}

# kubeadm's: how long a terminating CoreDNS keeps answering, the time every node's proxy has to
# take it out of the Service (install_coredns's ``lameduck``)
KUBEADM_LAMEDUCK = "5s"

COREFILE = f"""\
.:53 {{
    errors
    health {{
        lameduck {KUBEADM_LAMEDUCK}
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
}}
"""


def coredns_manifests(image: str, replicas: int = 2, roll: str = "1", lameduck: str = KUBEADM_LAMEDUCK) -> str:
    """kubeadm's CoreDNS addon, with IMAGE (built here); ROLL: a pod-template annotation (a new
    value rolls the Deployment); LAMEDUCK: the health plugin's (kubeadm's 5 s by default)."""
    corefile = COREFILE.replace(f"lameduck {KUBEADM_LAMEDUCK}", f"lameduck {lameduck}")
    meta = {"namespace": DNS_NAMESPACE}
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    probe = {"periodSeconds": 2, "timeoutSeconds": 1}
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": DNS_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", **meta},
            "data": {"Corefile": corefile},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": DNS_DEPLOYMENT, "labels": DNS_LABELS, **meta},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": DNS_LABELS},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": DNS_LABELS, "annotations": {"roll": roll}},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "labelSelector": {"matchLabels": DNS_LABELS},
                                            "topologyKey": "kubernetes.io/hostname",
                                        },
                                    }
                                ]
                            }
                        },
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                                "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, **probe},
                                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, **probe},
                            }
                        ],
                        "volumes": [
                            {
                                "name": "config",
                                "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "labels": {**DNS_LABELS, "kubernetes.io/name": "CoreDNS"},
                **meta,
            },
            "spec": {
                "selector": DNS_LABELS,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def install_coredns(cluster: RealCluster, *, timeout: float = 180.0, lameduck: str = KUBEADM_LAMEDUCK) -> None:
    """Apply the CoreDNS addon and wait until both replicas are Ready (they reach the API through
    10.96.0.1, so the Service proxy must run first)."""
    image = cluster.images.get("coredns")
    if not image:
        raise ClusterError("no CoreDNS image in images.json: run hack/e2e-tools.sh and hack/images.sh")
    cluster.kubectl("apply", "-f", "-", input=coredns_manifests(image, lameduck=lameduck))
    wait_coredns(cluster, timeout=timeout)


def wait_coredns(cluster: RealCluster, *, timeout: float = 180.0) -> None:
    cluster.kubectl(
        "rollout", "status", f"deployment/{DNS_DEPLOYMENT}", "-n", DNS_NAMESPACE, f"--timeout={int(timeout)}s",
        timeout=timeout + 30,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # and the Service has both as serving endpoints
        slices = cluster.kubectl_json(
            "get", "endpointslices", "-n", DNS_NAMESPACE, "-l", "kubernetes.io/service-name=kube-dns"
        )
        ready = {
            a
            for s in slices["items"]
            for e in s.get("endpoints") or []
            if (e.get("conditions") or {}).get("ready")
            for a in e["addresses"]
        }
        if len(ready) >= 2:
            return
        time.sleep(0.5)
    raise ClusterError("kube-dns has fewer than 2 ready endpoints")


def roll_coredns(cluster: RealCluster, roll: str) -> None:
    """Replace both CoreDNS pods (a new pod-template annotation), as an upgrade does."""
    patch = {"spec": {"template": {"metadata": {"annotations": {"roll": roll}}}}}
    cluster.kubectl("patch", "deployment", DNS_DEPLOYMENT, "-n", DNS_NAMESPACE, "-p", json.dumps(patch))


# ------------------------------------------------------------------ clients in pods

DNSCLIENT = Path(__file__).with_name("dnsclient.py")
# In a pod with in-cluster config: the API through the `kubernetes` Service's name (cluster DNS,
# then 10.96.0.1 through the Service proxy), TLS checked against the ServiceAccount's CA.
API_GET = """\
import json, ssl, sys, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=d + "ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc" + sys.argv[1],
                             headers={"Authorization": "Bearer " + open(d + "token").read()})
print(urllib.request.urlopen(req, context=ctx, timeout=10).read().decode())
"""


def client_pod_manifest(name: str, node: str, image: str) -> str:
    """A pod on NODE with IMAGE's python3 (nftproxy's image), idle: clients run in it by exec."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "dnsclient"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "c", "image": image, "imagePullPolicy": "Never", "command": ["sleep", "infinity"]}
                ],
            },
        }
    )


def pod_python(cluster: RealCluster, pod: str, script: str, *args: str, timeout: float = 60.0) -> str:
    return cluster.kubectl("exec", "-i", pod, "--", "python3", "-", *args, input=script, timeout=timeout)


def dns_query(cluster: RealCluster, pod: str, name: str, qtype: str = "A") -> dict[str, Any]:
    """One lookup from POD to the cluster DNS: {"result": ok|failed|timeout, "answers": [[type, data]]}."""
    out = pod_python(cluster, pod, DNSCLIENT.read_text(), "query", CLUSTER_DNS_IP, name, qtype)
    answer: dict[str, Any] = json.loads(out)
    return answer


def api_get(cluster: RealCluster, pod: str, path: str) -> Any:
    return json.loads(pod_python(cluster, pod, API_GET, path))


class DNSLoop:
    """Continuous lookups from a pod (dnsclient.py ``loop``) until stop()."""

    def __init__(self, cluster: RealCluster, pod: str, name: str, mode: str) -> None:
        self.cluster, self.pod = cluster, pod
        self.stop_file = f"/tmp/dns-stop-{os.getpid()}-{id(self)}"
        kubectl = [str(find_binary("kubectl")), f"--kubeconfig={cluster.kubeconfig}"]
        argv = [*kubectl, "exec", "-i", pod, "--", "python3", "-", "loop", CLUSTER_DNS_IP, name, mode, self.stop_file]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(DNSCLIENT.read_text())
        self.proc.stdin.close()
        self.proc.stdin = None  # sent: communicate() only reads

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.cluster.kubectl("exec", self.pod, "--", "touch", self.stop_file)
        out, err = self.proc.communicate(timeout=60)
        if self.proc.returncode != 0:
            raise ClusterError(f"DNS client in {self.pod} failed ({self.proc.returncode}): {err.strip()[-500:]}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def __del__(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
