"""The Helm chart (charts/nftproxy): lint, schema, rendered DaemonSet, real install/upgrade, RBAC."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nftproxy import __version__
from testkit.k8s.controlplane import ControlPlane, ControlPlaneError, cache_dir
from tests.k8s.helmchart import CHART, KUBE_VERSION, REPO, Helm, HelmError, Release, find, install

pytestmark = pytest.mark.k8s

CRD_NAME = "proxystatuses.nftproxy.io"


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _rules(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                out.setdefault((group, resource), set()).update(rule.get("verbs", []))
    return out


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm, offline (lint / template)."""
    try:
        return Helm(tmp_path_factory.mktemp("helm"))
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def helm_k8s(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """helm, talking to the test control plane as its admin."""
    return Helm(tmp_path_factory.mktemp("helm-k8s"), control_plane.kubeconfig)


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, helm_k8s: Helm) -> Iterator[Release]:
    """The chart installed with its defaults, in its own namespace."""
    rel = install(control_plane, helm_k8s, _unique("np"), _unique("nftproxy-chart"))
    try:
        yield rel
    finally:
        rel.uninstall()


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_lint_is_clean(helm: Helm, strict: bool) -> None:
    for values in (
        [],
        [
            "serviceProxyName=nftproxy",
            "apiServer.host=10.0.0.1",
            "clusterCIDR={10.244.0.0/16,fd00:10:244::/56}",
            "metricsService.enabled=true",
            "enableNetRaw=true",
        ],
    ):
        args = ["lint", str(CHART), *(["--strict"] if strict else [])]
        res = helm(*args, *(a for v in values for a in ("--set", v)), check=False)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        assert "1 chart(s) linted, 0 chart(s) failed" in out
        assert "[WARNING]" not in out and "[ERROR]" not in out, out


SCHEMA = "values don't meet the specifications of the schema(s)"


BAD_VALUES: list[tuple[list[str], list[str]]] = [
    (["minSyncPeriod=fast"], [SCHEMA, "at '/minSyncPeriod': 'fast' does not match pattern"]),
    (["syncPeriod=1 minute"], [SCHEMA, "at '/syncPeriod'"]),
    (["conntrack.tcpTimeoutCloseWait=1 hour"], [SCHEMA, "at '/conntrack/tcpTimeoutCloseWait'"]),
    (["conntrack.setSysctl=true"], [SCHEMA, "additional properties 'setSysctl' not allowed"]),
    (["healthzPort=70000"], [SCHEMA, "at '/healthzPort': maximum: got 70,000, want 65,535"]),
    (["metricsPort=0"], [SCHEMA, "at '/metricsPort': minimum"]),
    (["logLevel=verbose"], [SCHEMA, "at '/logLevel': value must be one of 'debug', 'info', 'warning'"]),
    (["clusterCIDR={10.0.0.0/33}"], [SCHEMA, "at '/clusterCIDR/0': '10.0.0.0/33' does not match pattern"]),
    (["nodePortAddresses={nodes}"], [SCHEMA, "at '/nodePortAddresses/0'"]),
    (["masqueradeAll=maybe"], [SCHEMA, "at '/masqueradeAll': got string, want boolean"]),
    (["detectLocalMode=PodCIDR"], [SCHEMA, "at '/detectLocalMode'"]),
    (["detectLocal.interfaceNamePrefix=veth*"], [SCHEMA, "at '/detectLocal/interfaceNamePrefix'"]),
    (["apiServer.port=99999"], [SCHEMA, "at '/apiServer/port'"]),
    (["apiServer.host=https://api:6443"], [SCHEMA, "at '/apiServer/host'"]),
    (["image.pullPolicy=Sometimes"], [SCHEMA, "at '/image/pullPolicy'"]),
    (["updateStrategy.type=Recreate"], [SCHEMA, "at '/updateStrategy/type'"]),
    (["updateStrategy.rollingUpdate.maxSurge=1"], [SCHEMA, "additional properties 'maxSurge' not allowed"]),
    (["minSyncPeriodd=1s"], [SCHEMA, "additional properties 'minSyncPeriodd' not allowed"]),
    (["serviceMonitor.jobName=kube proxy"], [SCHEMA, "at '/serviceMonitor/jobName'"]),
    (["prometheusRule.lastSyncMaxAgeSeconds=10m"], [SCHEMA, "at '/prometheusRule/lastSyncMaxAgeSeconds'"]),
    (["metricsPort=10256"], ["healthzPort and metricsPort must differ"]),
    (["serviceAccount.create=false"], ["serviceAccount.name is required when serviceAccount.create is false"]),
]


@pytest.mark.parametrize(("values", "messages"), BAD_VALUES, ids=[v[0] for v, _ in BAD_VALUES])
def test_bad_values_are_refused(helm: Helm, values: list[str], messages: list[str]) -> None:
    res = helm(
        "template", "np", str(CHART), "--kube-version", KUBE_VERSION, *(a for v in values for a in ("--set", v)),
        check=False,
    )  # fmt: skip
    assert res.returncode != 0, f"{values} was accepted"
    assert res.stdout == ""
    for message in messages:
        assert message in res.stderr, res.stderr


def test_daemonset_defaults(helm: Helm) -> None:
    objs = helm.template()
    ds = find(objs, "DaemonSet")
    assert ds["metadata"]["namespace"] == "kube-system"
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["serviceAccountName"] == find(objs, "ServiceAccount")["metadata"]["name"]
    assert "hostPID" not in pod and "hostIPC" not in pod
    (c,) = pod["containers"]
    assert c["image"] == f"nftproxy:{__version__}"  # the chart's appVersion, the release (tests/unit/test_release.py)
    assert c["command"] == ["python", "-m", "nftproxy", "run"]
    assert "args" not in c

    sc = c["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsUser"] == 0
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    assert {m["mountPath"]: m["name"] for m in c["volumeMounts"]} == {
        "/tmp": "tmp",
        "/host/proc/sys/net/netfilter": "conntrack-sysctls",
    }
    vols = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in vols["tmp"]
    # the node's conntrack sysctls, writable with NET_ADMIN alone (the container's /proc/sys is read-only)
    assert vols["conntrack-sysctls"]["hostPath"] == {"path": "/proc/sys/net/netfilter", "type": "Directory"}

    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # its own DaemonSet (a stop with it gone or no longer for this node removes the tables)
    assert env.pop("NFTPROXY_DAEMONSET")["value"] == ds["metadata"]["name"]
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert {k: v["value"] for k, v in env.items() if "value" in v} == {
        "NFTPROXY_MASQUERADE_ALL": "false",
        "NFTPROXY_MIN_SYNC_PERIOD": "1s",
        "NFTPROXY_SYNC_PERIOD": "30s",
        "NFTPROXY_STATUS_PERIOD": "5s",
        "NFTPROXY_HEALTHZ_BIND_ADDRESS": "0.0.0.0:10256",
        "NFTPROXY_METRICS_BIND_ADDRESS": "0.0.0.0:10249",
        "NFTPROXY_LOG_LEVEL": "info",
        "NFTPROXY_LOAD_BALANCING": "random",
        "NFTPROXY_SERVICE_COUNTERS": "false",
        # kube-proxy's conntrack defaults
        "NFTPROXY_CONNTRACK_SYSCTL_DIR": "/host/proc/sys/net/netfilter",
        "NFTPROXY_CONNTRACK_TCP_TIMEOUT_ESTABLISHED": "24h",
        "NFTPROXY_CONNTRACK_TCP_TIMEOUT_CLOSE_WAIT": "1h",
        "NFTPROXY_CONNTRACK_TCP_BE_LIBERAL": "false",
        "NFTPROXY_CONNTRACK_UDP_TIMEOUT": "0",
        "NFTPROXY_CONNTRACK_UDP_TIMEOUT_STREAM": "0",
        "NFTPROXY_CONNTRACK_MAX_PER_CORE": "32768",
        "NFTPROXY_CONNTRACK_MIN": "131072",
    }

    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"healthz": 10256, "metrics": 10249}
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "healthz"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    # a slow start (a large cluster's first lists and sync) is not killed by the liveness probe
    assert c["startupProbe"]["httpGet"] == {"path": "/livez", "port": "healthz"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 300
    # no memory limit by default (kube-proxy's DaemonSet has none; values.yaml sizes one by Services)
    assert c["resources"] == {"requests": {"cpu": "50m", "memory": "96Mi"}}

    assert not [o for o in objs if o["kind"] == "Service"], "no metrics Service by default"
    assert not [o for o in objs if o["kind"] == "CustomResourceDefinition"], "CRDs come from crds/"


def test_nodeport_addresses_take_kube_proxys_keywords(helm: Helm) -> None:
    """primary, localhost and all, mixed with CIDRs, as kube-proxy's nodePortAddresses."""
    ds = find(helm.template(["nodePortAddresses={primary,localhost,10.0.0.0/8}"]), "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NFTPROXY_NODEPORT_ADDRESSES"] == "primary,localhost,10.0.0.0/8"


def test_feature_gates_as_kube_proxys_and_none_by_default(helm: Helm) -> None:
    """featureGates (gate: bool) reaches `nftproxy run` as kube-proxy's --feature-gates syntax;
    unset, no variable: each gate follows the cluster's version. The schema names the gates."""

    def env(values: list[str]) -> dict[str, str | None]:
        ds = find(helm.template(values), "DaemonSet")
        return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "NFTPROXY_FEATURE_GATES" not in env([])
    got = env(["featureGates.KubeProxyNFTablesLocalhostNodePorts=false"])
    assert got["NFTPROXY_FEATURE_GATES"] == "KubeProxyNFTablesLocalhostNodePorts=false"
    with pytest.raises(HelmError, match="KubeProxyNFTablesLocalhostNodePorts"):
        helm.template(["featureGates.NoSuchGate=true"])


def test_conntrack_sysctls_off_mounts_nothing_and_sets_nothing(helm: Helm) -> None:
    ds = find(helm.template(["conntrack.setSysctls=false"]), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert [v["name"] for v in pod["volumes"]] == ["tmp"]
    assert [m["name"] for m in c["volumeMounts"]] == ["tmp"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert {k: v for k, v in env.items() if "CONNTRACK" in k} == {
        "NFTPROXY_CONNTRACK_TCP_TIMEOUT_ESTABLISHED": "0",
        "NFTPROXY_CONNTRACK_TCP_TIMEOUT_CLOSE_WAIT": "0",
        "NFTPROXY_CONNTRACK_MAX_PER_CORE": "0",
    }
    ds = find(helm.template(["conntrack.tcpTimeoutCloseWait=2h0m0s", "conntrack.tcpBeLiberal=true"]), "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NFTPROXY_CONNTRACK_TCP_TIMEOUT_CLOSE_WAIT"] == "2h0m0s"
    assert env["NFTPROXY_CONNTRACK_TCP_BE_LIBERAL"] == "true"
    assert (env["NFTPROXY_CONNTRACK_MAX_PER_CORE"], env["NFTPROXY_CONNTRACK_MIN"]) == ("32768", "131072")
    ds = find(helm.template(["conntrack.maxPerCore=65536", "conntrack.min=0"]), "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["NFTPROXY_CONNTRACK_MAX_PER_CORE"], env["NFTPROXY_CONNTRACK_MIN"]) == ("65536", "0")


def test_kube_proxy_config_from_configmap_mounts_it_where_kube_proxy_reads_it(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubeProxyConfig.fromConfigMap: kubeadm's ConfigMap mounted at /var/lib/kube-proxy (its
    kubeconfig.conf names that directory) and read with --config; unset: nothing of it."""
    plain = helm.template()
    volumes = find(plain, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    assert "kube-proxy-config" not in [v["name"] for v in volumes]
    assert "NFTPROXY_CONFIG" not in _env_of(plain)
    objs = helm.template(["kubeProxyConfig.fromConfigMap=kube-proxy"])
    pod = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "kube-proxy-config"]
    assert volume["configMap"] == {"name": "kube-proxy"}
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "kube-proxy-config"]
    assert mount == {"name": "kube-proxy-config", "mountPath": "/var/lib/kube-proxy", "readOnly": True}
    assert _env_of(objs)["NFTPROXY_CONFIG"] == "/var/lib/kube-proxy/config.conf"
    custom = find(helm.template(["kubeProxyConfig.fromConfigMap=proxy", "kubeProxyConfig.key=kp.yaml"]), "DaemonSet")
    assert _env_of([custom])["NFTPROXY_CONFIG"] == "/var/lib/kube-proxy/kp.yaml"
    with pytest.raises(HelmError, match="fromConfigMap"):
        helm.template(["kubeProxyConfig.fromConfigMap=Not_A_Name"])
    # `run` reads the rendered variable: kubeadm's file (a copy standing at the mounted path)
    from nftproxy.cli import parse_args  # noqa: PLC0415

    monkeypatch.setenv("NFTPROXY_CONFIG", str(REPO / "tests" / "golden" / "kube-proxy" / "kubeadm-config.conf"))
    args = parse_args(["run", "--node-name", "n1"])
    assert args.kubeconfig == "/var/lib/kube-proxy/kubeconfig.conf" and args.cluster_cidr == ["10.244.0.0/16"]


def test_daemonset_values(helm: Helm) -> None:
    objs = helm.template(
        [
            "apiServer.host=192.168.1.10",
            "apiServer.port=443",
            "clusterCIDR={10.244.0.0/16,fd00:10:244::/56}",
            "nodePortAddresses={192.168.0.0/16}",
            "masqueradeAll=true",
            "detectLocalMode=InterfaceNamePrefix",
            "detectLocal.interfaceNamePrefix=eni",
            "minSyncPeriod=500ms",
            "syncPeriod=1m",
            "logLevel=debug",
            "healthzPort=20256",
            "healthzBindIP=127.0.0.1",
            "metricsPort=20249",
            "metricsBindIP=::",
            "serviceProxyName=nftproxy",
            "cleanupKubeProxy=true",
            "enableNetRaw=true",
            "tolerations[0].key=node-role.kubernetes.io/control-plane",
            "tolerations[0].operator=Exists",
            "tolerations[0].effect=NoSchedule",
            "updateStrategy.rollingUpdate.maxUnavailable=25%",
            "priorityClassName=",
            "image.repository=registry.example/nftproxy",
            "image.tag=dev",
            "podAnnotations.example\\.com/a=b",
            "metricsService.enabled=true",
        ],
        release="edge",
        namespace="nftproxy",
    )
    ds = find(objs, "DaemonSet")
    assert ds["metadata"]["name"] == "edge-nftproxy"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "25%"}
    tpl = ds["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"example.com/a": "b"}
    pod = tpl["spec"]
    assert "priorityClassName" not in pod
    assert pod["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
    ]
    (c,) = pod["containers"]
    assert c["image"] == "registry.example/nftproxy:dev"
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "192.168.1.10"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["NFTPROXY_CLUSTER_CIDR"] == "10.244.0.0/16,fd00:10:244::/56"
    assert env["NFTPROXY_NODEPORT_ADDRESSES"] == "192.168.0.0/16"
    assert env["NFTPROXY_MASQUERADE_ALL"] == "true"
    assert env["NFTPROXY_DETECT_LOCAL_MODE"] == "InterfaceNamePrefix"
    assert env["NFTPROXY_POD_INTERFACE_NAME_PREFIX"] == "eni"
    assert "NFTPROXY_POD_BRIDGE_INTERFACE" not in env  # unset values are left out
    assert env["NFTPROXY_MIN_SYNC_PERIOD"] == "500ms"
    assert env["NFTPROXY_SYNC_PERIOD"] == "1m"
    assert env["NFTPROXY_LOG_LEVEL"] == "debug"
    assert env["NFTPROXY_HEALTHZ_BIND_ADDRESS"] == "127.0.0.1:20256"
    assert env["NFTPROXY_METRICS_BIND_ADDRESS"] == "[::]:20249"
    assert env["NFTPROXY_SERVICE_PROXY_NAME"] == "nftproxy"
    assert env["NFTPROXY_CLEANUP_KUBE_PROXY"] == "true"
    assert env["NFTPROXY_DAEMONSET"] == "edge-nftproxy"
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"healthz": 20256, "metrics": 20249}
    # Health bound to loopback: the kubelet (host network) probes loopback too.
    assert c["livenessProbe"]["httpGet"] == {"host": "127.0.0.1", "path": "/livez", "port": "healthz"}

    svc = find(objs, "Service")
    assert svc["metadata"]["name"] == "edge-nftproxy-metrics"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 20249, "targetPort": "metrics", "protocol": "TCP"}]


def _env_of(objs: list[dict[str, Any]]) -> dict[str, str]:
    (c,) = find(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


@pytest.mark.parametrize("custom", [False, True], ids=["defaults", "custom"])
def test_operator_understands_the_rendered_environment(
    helm: Helm, monkeypatch: pytest.MonkeyPatch, custom: bool
) -> None:
    """The chart's environment, read by `nftproxy run`'s own flag parser: every variable known,
    every value accepted, and meaning what values.yaml says."""
    from nftproxy.cli import build_parser  # noqa: PLC0415
    from nftproxy.cli.flags import ENV, settings_from_args  # noqa: PLC0415

    values = [
        "clusterCIDR={10.244.0.0/16,fd00:10:244::/56}",
        "nodePortAddresses={192.168.0.0/16}",
        "masqueradeAll=true",
        "minSyncPeriod=500ms",
        "syncPeriod=1m",
        "statusPeriod=10s",
        "logLevel=debug",
        "healthzBindIP=127.0.0.1",
        "healthzPort=20256",
        "metricsBindIP=::",
        "metricsPort=20249",
        "serviceProxyName=nftproxy",
        "cleanupKubeProxy=true",
    ]
    objs = helm.template(values if custom else [])
    env = _env_of(objs)
    unknown = set(env) - set(ENV.values()) - {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
    assert unknown == set(), "the chart sets variables nftproxy does not read"
    for var in ENV.values():
        monkeypatch.delenv(var, raising=False)
    for var, value in {**env, "NODE_NAME": "node-a", "POD_NAMESPACE": "kube-system"}.items():  # (downward API)
        monkeypatch.setenv(var, value)
    args = build_parser().parse_args(["run"])
    settings = settings_from_args(args)
    assert settings.node_name == "node-a"
    assert (settings.daemonset_namespace, settings.daemonset) == (
        "kube-system",
        find(objs, "DaemonSet")["metadata"]["name"],
    )
    assert settings.cleanup_kube_proxy is custom
    if not custom:
        assert settings.proxy.cluster_cidrs == settings.proxy.nodeport_addresses == ()
        assert settings.proxy.masquerade_all is False
        assert settings.proxy.service_proxy_name is None
        assert (settings.min_sync_period, settings.sync_period, settings.status_period) == (1, 30, 5)
        assert (settings.healthz, settings.metrics) == (("0.0.0.0", 10256), ("0.0.0.0", 10249))
        assert settings.log_level == "info"
        return
    assert [str(n) for n in settings.proxy.cluster_cidrs] == ["10.244.0.0/16", "fd00:10:244::/56"]
    assert [str(n) for n in settings.proxy.nodeport_addresses] == ["192.168.0.0/16"]
    assert settings.proxy.masquerade_all is True
    assert settings.proxy.service_proxy_name == "nftproxy"
    assert (settings.min_sync_period, settings.sync_period, settings.status_period) == (0.5, 60, 10)
    assert (settings.healthz, settings.metrics) == (("127.0.0.1", 20256), ("::", 20249))
    assert settings.log_level == "debug"


def test_cluster_role_is_least_privilege(helm: Helm) -> None:
    objs = helm.template()
    sa = find(objs, "ServiceAccount")
    # Which rules, exactly: tests/k8s/test_chart_audit.py (from the audit log of a real run).
    # Cluster-wide what a proxy reads and writes; in its own namespace only, its own DaemonSet.
    for kind in ("ClusterRole", "Role"):
        role = find(objs, kind)
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        binding = find(objs, f"{kind}Binding")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind,
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
        ]
    role = find(objs, "Role")
    assert role["metadata"]["namespace"] == find(objs, "RoleBinding")["metadata"]["namespace"] == "kube-system"
    assert _rules(role["rules"]) == {("apps", "daemonsets"): {"get", "list", "watch"}}


# --------------------------------------------------------------------------- against the API server


def _apply_crds(cp: ControlPlane) -> None:
    cp.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    cp.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=30s")


def test_rendered_chart_is_accepted_by_the_apiserver(control_plane: ControlPlane, helm: Helm) -> None:
    cp = control_plane
    _apply_crds(cp)
    ns = _unique("nftproxy-dry")
    cp.kubectl("create", "namespace", ns)
    for values in (
        [],
        [
            "apiServer.host=10.0.0.1",
            "clusterCIDR={10.244.0.0/16,fd00:10:244::/56}",
            "enableNetRaw=true",
            "metricsService.enabled=true",
            "healthzBindIP=127.0.0.1",
            "updateStrategy.type=OnDelete",
        ],
    ):
        objs = helm.template(values, release="dry", namespace=ns)
        stream = yaml.safe_dump_all(objs)
        res = cp.kubectl("apply", "--dry-run=server", "-f", "-", "-o", "json", input=stream)
        applied = json.loads(res.stdout)
        items = applied["items"] if applied.get("kind") == "List" else [applied]
        assert sorted(o["kind"] for o in items) == sorted(o["kind"] for o in objs)
        ds = find(items, "DaemonSet")
        # What the server stored (defaults filled in) keeps the security posture.
        (c,) = ds["spec"]["template"]["spec"]["containers"]
        assert c["securityContext"]["privileged"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # Dry run: nothing was created.
    assert cp.kubectl("get", "daemonsets", "-n", ns, "-o", "name").stdout.strip() == ""
    # The ProxyStatus schema the chart ships accepts what nftproxy writes.
    status = {
        "apiVersion": "nftproxy.io/v1alpha1",
        "kind": "ProxyStatus",
        "metadata": {"name": "node-a"},
        "spec": {"nodeName": "node-a"},
    }
    cp.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(status))


def test_install_then_upgrade(control_plane: ControlPlane, helm_k8s: Helm) -> None:
    cp = control_plane
    name, ns = _unique("np"), _unique("nftproxy-up")
    rel = install(cp, helm_k8s, name, ns)
    try:
        # The CRD is in place (installed from crds/ unless an earlier test applied it).
        cp.kubectl("get", f"crd/{CRD_NAME}")

        def daemonset_env() -> dict[str, str]:
            ds = json.loads(cp.kubectl("get", "daemonset", rel.fullname, "-n", ns, "-o", "json").stdout)
            (c,) = ds["spec"]["template"]["spec"]["containers"]
            return {e["name"]: e.get("value", "") for e in c["env"]}

        assert daemonset_env()["NFTPROXY_LOG_LEVEL"] == "info"
        notes = helm_k8s("get", "notes", name, "-n", ns).stdout
        assert "kubectl get proxystatus" in notes and "nft list table ip nftproxy" in notes

        helm_k8s(
            "upgrade", name, str(CHART), "-n", ns, "--reuse-values",
            "--set", "logLevel=debug", "--set", "clusterCIDR={10.244.0.0/16}",
        )  # fmt: skip
        env = daemonset_env()
        assert env["NFTPROXY_LOG_LEVEL"] == "debug"
        assert env["NFTPROXY_CLUSTER_CIDR"] == "10.244.0.0/16"
        status = json.loads(helm_k8s("status", name, "-n", ns, "-o", "json").stdout)
        assert (status["version"], status["info"]["status"]) == (2, "deployed")

        # A bad value is refused before anything changes.
        bad = helm_k8s(
            "upgrade", name, str(CHART), "-n", ns, "--reuse-values", "--set", "minSyncPeriod=fast", check=False
        )
        assert bad.returncode != 0
        assert "at '/minSyncPeriod': 'fast' does not match pattern" in bad.stderr, bad.stderr
        status = json.loads(helm_k8s("status", name, "-n", ns, "-o", "json").stdout)
        assert status["version"] == 2
        assert daemonset_env()["NFTPROXY_LOG_LEVEL"] == "debug"
    finally:
        rel.uninstall()
    # Uninstall removes the cluster-scoped RBAC; the CRD stays (Helm never deletes crds/).
    left = cp.kubectl("get", "clusterrole", rel.fullname, check=False)
    assert left.returncode != 0 and "NotFound" in left.stderr
    cp.kubectl("get", f"crd/{CRD_NAME}")


def _json_stream(text: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON document per object created: parse them all."""
    decoder = json.JSONDecoder()
    out, pos = [], 0
    while pos < len(text.rstrip()):
        obj, end = decoder.raw_decode(text, pos)
        out.append(obj)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _access_reviews(cp: ControlPlane, kubeconfig: Path, checks: list[dict[str, str]]) -> list[bool]:
    """SelfSubjectAccessReviews for CHECKS (resourceAttributes), as the identity of KUBECONFIG,
    in one kubectl call (`kubectl auth can-i` asks the same API, one question per process)."""
    reviews = [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }
        for attrs in checks
    ]
    # --validate=false: client-side validation would list CRDs, which this identity may not do.
    out = cp.kubectl(
        "create", "--validate=false", "-f", "-", "-o", "json", input=yaml.safe_dump_all(reviews), kubeconfig=kubeconfig
    )
    items = _json_stream(out.stdout)
    assert len(items) == len(checks)
    return [bool(i["status"].get("allowed")) for i in items]


def _attrs(verb: str, resource: str, *, group: str = "", subresource: str = "", namespace: str = "") -> dict[str, str]:
    a = {"verb": verb, "resource": resource, "group": group}
    if subresource:
        a["subresource"] = subresource
    if namespace:
        a["namespace"] = namespace
    return a


def _granted(helm: Helm) -> list[dict[str, str]]:
    """Every (verb, resource, group) the rendered ClusterRole grants, as access-review attributes
    (on Services, EndpointSlices and Events in a namespace as well as cluster-wide)."""
    role = find(helm.template(), "ClusterRole")
    out = []
    for (group, resource), verbs in sorted(_rules(role["rules"]).items()):
        name, _, sub = resource.partition("/")
        for verb in sorted(verbs):
            out.append(_attrs(verb, name, group=group, subresource=sub))
            if name in ("services", "endpointslices", "events"):
                out.append(_attrs(verb, name, group=group, subresource=sub, namespace="kube-system"))
    return out


# Never granted, whatever the code comes to need (a proxy reads the cluster, it does not run it).
DENIED = [
    _attrs("create", "services", namespace="default"),
    _attrs("update", "services", namespace="default"),
    _attrs("patch", "services", namespace="default"),
    _attrs("delete", "services", namespace="default"),
    _attrs("update", "services", subresource="status", namespace="default"),
    _attrs("get", "secrets", namespace="kube-system"),
    _attrs("list", "secrets"),
    _attrs("create", "pods", namespace="default"),
    _attrs("get", "pods", namespace="default"),
    _attrs("delete", "nodes"),
    _attrs("update", "nodes"),
    _attrs("patch", "nodes", subresource="status"),
    _attrs("create", "endpointslices", group="discovery.k8s.io", namespace="default"),
    _attrs("list", "endpoints"),
    _attrs("list", "configmaps"),
    _attrs("delete", "events", namespace="default"),
    _attrs("delete", "proxystatuses", group="nftproxy.io"),
    _attrs("list", "customresourcedefinitions", group="apiextensions.k8s.io"),
    _attrs("create", "clusterkopfpeerings", group="kopf.dev"),
    _attrs("create", "serviceaccounts", subresource="token", namespace="kube-system"),
    _attrs("impersonate", "users"),
    _attrs("escalate", "clusterroles", group="rbac.authorization.k8s.io"),
]


def test_rbac_least_privilege_for_real(
    control_plane: ControlPlane, release: Release, helm: Helm, tmp_path: Path
) -> None:
    """The API server enforces the rendered ClusterRole, no more and no less."""
    cp = control_plane
    allowed_checks = _granted(helm)
    kc = release.token_kubeconfig(tmp_path / "nftproxy.kubeconfig")
    who = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kc).stdout)
    assert who["status"]["userInfo"]["username"] == (
        f"system:serviceaccount:{release.namespace}:{release.service_account}"
    )

    # its own DaemonSet, in its own namespace only (the Role)
    allowed_checks += [
        _attrs(v, "daemonsets", group="apps", namespace=release.namespace) for v in ("get", "list", "watch")
    ]
    denied_checks = [
        *DENIED,
        _attrs("get", "daemonsets", group="apps", namespace="default"),
        _attrs("list", "daemonsets", group="apps"),
        _attrs("update", "daemonsets", group="apps", namespace=release.namespace),
        _attrs("delete", "daemonsets", group="apps", namespace=release.namespace),
    ]
    n = len(allowed_checks)
    allowed = _access_reviews(cp, kc, allowed_checks + denied_checks)
    assert [a for a, ok in zip(allowed_checks, allowed[:n], strict=True) if not ok] == [], "should be allowed"
    assert [d for d, ok in zip(denied_checks, allowed[n:], strict=True) if ok] == [], "should be denied"

    # The whole grant, as the API server computes it (SelfSubjectRulesReview): exactly the rendered
    # ClusterRole's rules plus what every authenticated identity has, i.e. what a ServiceAccount
    # bound to nothing gets (self reviews; v1.37 adds reading ClusterTrustBundles for everyone).
    def whole_grant(kubeconfig: Path) -> dict[tuple[str, str], set[str]]:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"},
        }
        out = cp.kubectl(
            "create", "--validate=false", "-f", "-", "-o", "json", input=json.dumps(review), kubeconfig=kubeconfig
        ).stdout
        return _rules(json.loads(out)["status"]["resourceRules"])

    cp.kubectl("create", "serviceaccount", "nobody", "-n", release.namespace)
    token = cp.kubectl("create", "token", "nobody", "-n", release.namespace, "--duration=10m").stdout.strip()
    everyone = whole_grant(cp.token_kubeconfig(token, tmp_path / "nobody.kubeconfig"))
    assert all(k[1].startswith("self") or k == ("certificates.k8s.io", "clustertrustbundles") for k in everyone), (
        everyone
    )
    rules = whole_grant(kc)
    assert {k: v for k, v in rules.items() if everyone.get(k) != v} == _rules(
        find(helm.template(), "ClusterRole")["rules"]
    )

    # And real requests with the token: reads work, writes and secrets are forbidden.
    cp.kubectl("get", "services", "--all-namespaces", kubeconfig=kc)
    cp.kubectl("get", "endpointslices.discovery.k8s.io", "--all-namespaces", kubeconfig=kc)
    cp.kubectl("get", "nodes", kubeconfig=kc)
    for argv, forbidden in (
        (["get", "secrets", "-n", "kube-system"], "secrets is forbidden"),
        (["create", "--validate=false", "service", "clusterip", "intruder", "--tcp=80:80"], "services is forbidden"),
        (["get", "pods", "-n", "default"], "pods is forbidden"),
        (["delete", "node", "node-x"], 'nodes "node-x" is forbidden'),
    ):
        denied = cp.kubectl(*argv, kubeconfig=kc, check=False)
        assert denied.returncode != 0 and forbidden in denied.stderr, (argv, denied.stderr)

    # Its own ProxyStatus, written as `nftproxy run` writes it (the first time get, create, merge-patch
    # of the status subresource; then the patch alone, and a 404 creates it again; kubectl patch would
    # also get the subresource first, which nftproxy never does); deleting is not its job.
    from nftproxy.operator import kube  # noqa: PLC0415

    _apply_crds(cp)
    node = _unique("node")
    api = kube.connect(str(kc))
    try:
        kube.write_proxy_status(api, node, None, {"services": 3, "endpoints": 7})
        kube.write_proxy_status(api, node, None, {"services": 4, "endpoints": 7}, exists=True)
        got = json.loads(cp.kubectl("get", "proxystatus", node, "-o", "json", kubeconfig=kc).stdout)
        assert got["status"] == {"services": 4, "endpoints": 7}
        cp.kubectl("delete", "proxystatus", node)  # by an admin, behind the proxy's back
        kube.write_proxy_status(api, node, None, {"services": 5, "endpoints": 7}, exists=True)
        got = json.loads(cp.kubectl("get", "proxystatus", node, "-o", "json", kubeconfig=kc).stdout)
        assert got["status"] == {"services": 5, "endpoints": 7}
        denied = cp.kubectl("delete", "proxystatus", node, kubeconfig=kc, check=False)
        assert denied.returncode != 0 and f'proxystatuses.nftproxy.io "{node}" is forbidden' in denied.stderr, (
            denied.stderr
        )
    finally:
        api.close()
        cp.kubectl("delete", "proxystatus", node, "--ignore-not-found")


# --------------------------------------------------------------------------- monitoring


def test_service_monitor_selects_the_metrics_service(helm: Helm) -> None:
    objs = helm.template({"metricsService.enabled": "true", "serviceMonitor.enabled": "true"})
    sm, svc = find(objs, "ServiceMonitor"), find(objs, "Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    ports = {p["name"] for p in svc["spec"]["ports"]}
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"] and "metrics" in ports
    assert sm["spec"]["endpoints"][0]["relabelings"][0]["targetLabel"] == "node"
    # prometheus-operator sets `job` from the Service's label that jobLabel names: by default
    # kube-proxy, the job the kubernetes-mixin's kube-proxy alerts and dashboard select
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "kube-proxy"
    objs = helm.template(
        {"metricsService.enabled": "true", "serviceMonitor.enabled": "true", "serviceMonitor.jobName": "nftproxy"}
    )
    sm, svc = find(objs, "ServiceMonitor"), find(objs, "Service")
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "nftproxy"
    res = helm(
        "template",
        "np",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "serviceMonitor.enabled=true",
        check=False,
    )
    assert res.returncode != 0 and "needs metricsService.enabled" in res.stderr


def test_prometheus_rule_is_off_by_default_and_needs_the_service_monitor(helm: Helm) -> None:
    """The PrometheusRule (its alerts: tests/monitoring) only when asked for, and only with the
    ServiceMonitor whose targets' series it selects."""
    assert [o for o in helm.template({}) if o["kind"] == "PrometheusRule"] == []
    monitoring = {"metricsService.enabled": "true", "serviceMonitor.enabled": "true"}
    objs = helm.template({**monitoring, "prometheusRule.enabled": "true", "prometheusRule.labels.release": "kps"})
    rule = find(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "kps"
    res = helm(
        "template", "np", str(CHART), "--kube-version", KUBE_VERSION, "--set", "prometheusRule.enabled=true",
        check=False,
    )  # fmt: skip
    assert res.returncode != 0 and "needs serviceMonitor.enabled" in res.stderr


SERVICE_MONITOR_CRD = cache_dir() / "crds" / "monitoring.coreos.com_servicemonitors.yaml"  # hack/crds.sh
PROMETHEUS_RULE_CRD = cache_dir() / "crds" / "monitoring.coreos.com_prometheusrules.yaml"  # hack/crds.sh


def test_service_monitor_is_valid_for_prometheus_operators_crd(helm: Helm, control_plane: ControlPlane) -> None:
    """The rendered ServiceMonitor against prometheus-operator's own CRD schema (its
    openAPIV3Schema, enforced by a real apiserver in a strict server-side dry run); a wrong field
    is refused, so the check can fail."""
    if not SERVICE_MONITOR_CRD.exists():
        pytest.fail(f"{SERVICE_MONITOR_CRD} is missing: run hack/crds.sh (hack/test.sh does)", pytrace=False)
    cp = control_plane
    cp.kubectl("apply", "--server-side", "-f", str(SERVICE_MONITOR_CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com", "--timeout=60s")
    ns = _unique("sm")
    cp.kubectl("create", "namespace", ns)
    try:
        objs = helm.template(
            {"metricsService.enabled": "true", "serviceMonitor.enabled": "true"}, release="sm", namespace=ns
        )
        sm = find(objs, "ServiceMonitor")

        def dry_run(obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
            return cp.kubectl(
                "apply", "--dry-run=server", "--validate=strict", "-f", "-", "-o", "json",
                input=yaml.safe_dump(obj), check=False,
            )  # fmt: skip

        res = dry_run(sm)
        assert res.returncode == 0, res.stderr
        stored = json.loads(res.stdout)["spec"]["endpoints"]
        for ours, theirs in zip(sm["spec"]["endpoints"], stored, strict=True):  # nothing pruned (defaults added)
            assert {k: v for k, v in theirs.items() if k in ours and k != "relabelings"} == {
                k: v for k, v in ours.items() if k != "relabelings"
            }
            for r_ours, r_theirs in zip(ours["relabelings"], theirs["relabelings"], strict=True):
                assert r_ours.items() <= r_theirs.items()
        bad = json.loads(json.dumps(sm))
        bad["spec"]["endpoints"][0]["scrapeInterval"] = "30s"  # not a field of an endpoint (`interval` is)
        res = dry_run(bad)
        assert res.returncode != 0 and "scrapeInterval" in res.stderr, res.stderr
        bad = json.loads(json.dumps(sm))
        bad["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"  # not one of the CRD's actions
        res = dry_run(bad)
        assert res.returncode != 0 and "action" in res.stderr, res.stderr
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_prometheus_rule_is_valid_for_prometheus_operators_crd(helm: Helm, control_plane: ControlPlane) -> None:
    """The rendered PrometheusRule against prometheus-operator's own CRD schema, as the
    ServiceMonitor above; a wrong field is refused, so the check can fail."""
    if not PROMETHEUS_RULE_CRD.exists():
        pytest.fail(f"{PROMETHEUS_RULE_CRD} is missing: run hack/crds.sh (hack/test.sh does)", pytrace=False)
    cp = control_plane
    cp.kubectl("apply", "--server-side", "-f", str(PROMETHEUS_RULE_CRD))
    cp.kubectl("wait", "--for=condition=Established", "crd/prometheusrules.monitoring.coreos.com", "--timeout=60s")
    ns = _unique("pr")
    cp.kubectl("create", "namespace", ns)
    try:
        values = {"metricsService.enabled": "true", "serviceMonitor.enabled": "true", "prometheusRule.enabled": "true"}
        rule = find(helm.template(values, release="pr", namespace=ns), "PrometheusRule")

        def dry_run(obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
            return cp.kubectl(
                "apply", "--dry-run=server", "--validate=strict", "-f", "-", "-o", "json",
                input=yaml.safe_dump(obj), check=False,
            )  # fmt: skip

        res = dry_run(rule)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["spec"] == rule["spec"]  # nothing pruned
        bad = json.loads(json.dumps(rule))
        bad["spec"]["groups"][0]["rules"][0]["severity"] = "critical"  # a label, not a field of a rule
        res = dry_run(bad)
        assert res.returncode != 0 and "severity" in res.stderr, res.stderr
    finally:
        cp.kubectl("delete", "namespace", ns, "--wait=false")


def test_dashboard_queries_only_metrics_nftproxy_exports(helm: Helm) -> None:
    """The Grafana dashboard ConfigMap (grafana_dashboard: "1"): its panels cover sync durations,
    network programming latency, changes pending, sync failures and Services programmed, and every
    metric a query names is one nftproxy's /metrics has (names read from the operator's registry)."""
    import re  # noqa: PLC0415

    from nftproxy.operator.metrics import Metrics  # noqa: PLC0415

    (cm,) = [o for o in helm.template({"grafanaDashboard.enabled": "true"}) if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["nftproxy.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b((?:kubeproxy|nftproxy)_[a-z_]+)", e)}
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}
    exported = {f.name + s for f in Metrics().registry.collect() for s in suffixes.get(f.type, ("",))}
    assert used and used <= exported, sorted(used - exported)
    for needed in (
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_network_programming_duration_seconds_bucket",
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "nftproxy_services",
    ):
        assert needed in used, needed
    assert all("node" in e for e in exprs), "every panel is per node"


def test_helm_test_hooks_check_a_service_through_the_proxy(helm: Helm) -> None:
    """`helm test`'s objects: a ClusterIP Service whose endpoints are the nftproxy pods' healthz
    port, and a host-network pod with the chart's ServiceAccount running `nftproxy selftest`
    against it (tests/e2e runs it for real). The pod is no DaemonSet's or Service's."""
    objs = helm.template({"apiServer.host": "10.0.0.1"}, tests=True)
    hooks = [o for o in objs if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert sorted(o["kind"] for o in hooks) == ["Pod", "Service"]
    ds = find(objs, "DaemonSet")
    svc = next(o for o in hooks if o["kind"] == "Service")
    pod = next(o for o in hooks if o["kind"] == "Pod")
    selector = ds["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"] == selector and svc["spec"]["ports"][0]["targetPort"] == "healthz"
    assert not selector.items() <= pod["metadata"]["labels"].items()
    spec = pod["spec"]
    assert spec["serviceAccountName"] == ds["spec"]["template"]["spec"]["serviceAccountName"]
    assert spec["hostNetwork"] is True and spec["restartPolicy"] == "Never"
    (c,) = spec["containers"]
    assert c["command"] == ["python", "-m", "nftproxy", "selftest"]
    env = svc["metadata"]["name"].upper().replace("-", "_") + "_SERVICE"
    assert c["args"][:2] == ["--service", f"$({env}_HOST):$({env}_PORT)"]
    assert {e["name"]: e["value"] for e in c["env"]}["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert all(o["kind"] not in ("Pod",) for o in helm.template())  # not rendered without the tests
