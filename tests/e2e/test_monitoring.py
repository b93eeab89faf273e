"""The chart's monitoring, scraped by a real Prometheus from the real cluster.

prometheus-operator's CRDs (hack/crds.sh, the operator's v0.85.0) are applied to the cluster and the
chart is installed with metricsService, serviceMonitor and prometheusRule on (the values of a
kube-prometheus-stack user; serviceMonitor.jobName at its default, kube-proxy, and the metrics
endpoint on every node address, the chart's default metricsBindIP 0.0.0.0, port 10249). The
ServiceMonitor and the PrometheusRule are read back from the API server, as the operator reads
them: what `helm` rendered and the API server accepted against the CRDs' schemas.

A real Prometheus (hack/prom-tools.sh) runs in the outside client's network namespace (the LAN
of the nodes, outside the cluster), its data in a temporary directory, stopped by PID at the end.
Its scrape config is what prometheus-operator generates for the ServiceMonitor
(testkit.prometheus.servicemonitor_scrape_configs: job from the Service label the jobLabel names,
port, path, the operator's relabelings and the chart's `node` one), with kubernetes_sd_configs
role endpoints against the cluster's API server, not static targets: the client namespace reaches
the API server's advertised address (APISERVER_IP, in the API server certificate) and
authenticates with a token of a ServiceAccount holding the read-only role kube-prometheus gives
its Prometheus (services, endpoints, endpointslices, pods). So discovery, relabeling and the
targets' disappearance when the pods go are Prometheus' own, as in a real installation. Deviations
from the operator's Prometheus, all for time: the scrape and rule evaluation interval is 1 s (the
ServiceMonitor says 30 s), every rule's ``for:`` is FOR (the mixin's and the chart's say 5 to 15
minutes; the rules' expressions, labels and annotations are the sources' unchanged, asserted
below), and discovery's changes reach the scrape manager within 1 s (its hidden flag
--scrape.discovery-reload-interval, 5 s by default).

Rule files: the kubernetes-mixin's kube-proxy alerts (tests/monitoring/kubernetes-mixin-kube-proxy.yaml)
and the PrometheusRule's groups. Checked over Prometheus' HTTP API: every node's target is
``up{job="kube-proxy"} == 1`` with the labels the operator gives; each query of the mixin's Proxy
dashboard (tests/monitoring/kubernetes-mixin-proxy-dashboard.yaml, verbatim from its source)
returns data (for every node where it draws a line per target), except what nftproxy cannot give
(NO_DATA, with the reason) and what shows only after such requests (OPTIONAL: API answers other
than 2xx, POSTs, which nftproxy makes only to create its ProxyStatus or an Event); no down
alert is active while nftproxy runs; then the DaemonSet is scaled away (a nodeSelector no node
matches) and the mixin's KubeProxyDown and the chart's NftproxyDown fire. The chart's
NftproxyTargetDown (and the mixin's KubeProxyInstanceUnreachable) select ``up == 0``, a target
that is discovered but does not answer: a target whose pod is gone is not discovered at all, so
they stay silent here, as for kube-proxy.

Shares the session's cluster: it starts by uninstalling whatever release another module left and
removing the nodes' tables (``nftproxy cleanup``), and ends with the release uninstalled, no
nftproxy table on any node, and its own objects (CRDs, ServiceAccount, role, workload) deleted.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.k8s.cluster import eventually
from testkit.k8s.controlplane import ControlPlaneError, cache_dir, find_binary
from testkit.prometheus import (
    Prometheus,
    prometheusrule_file,
    servicemonitor_scrape_configs,
)
from testkit.realcluster import RealCluster
from testkit.realcluster import workload as w
from testkit.realcluster.node import APISERVER_IP

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]

REPO = Path(__file__).resolve().parents[2]
MIXIN_RULES = REPO / "tests" / "monitoring" / "kubernetes-mixin-kube-proxy.yaml"
CRDS = [cache_dir() / "crds" / f"monitoring.coreos.com_{k}.yaml" for k in ("servicemonitors", "prometheusrules")]
VALUES: dict[str, str | bool] = {
    "metricsService.enabled": True,
    "serviceMonitor.enabled": True,
    "prometheusRule.enabled": True,
}
JOB = "kube-proxy"  # the chart's serviceMonitor.jobName default: the mixin's kubeProxySelector
INTERVAL = "1s"  # scrape and rule evaluation (the ServiceMonitor's is 30s)
FOR = "5s"  # every rule's `for:` (the sources': 5m to 15m); expressions unchanged
SA, SA_NAMESPACE, ROLE = "prometheus-e2e", "default", "nftproxy-e2e-prometheus"
# A Service and its pods, created while Prometheus scrapes: syncs to observe. Named anew by each
# run: the EndpointSlice controller leaves out the last-change-trigger-time of a Service
# re-created under the name of one it tracked a moment before, and no latency is observed then.
WORKLOAD = f"promweb-{os.getpid()}"

# The kubernetes-mixin's Proxy dashboard: its queries verbatim, with their source, in one list.
DASHBOARD = yaml.safe_load((REPO / "tests" / "monitoring" / "kubernetes-mixin-proxy-dashboard.yaml").read_text())
# Grafana's $__rate_interval: max($__interval + the data source's scrape interval, 4 x that
# interval); $__interval is at least the panels' minimum interval (1m), so with the data source's
# scrape interval set to this Prometheus' 1s: 1m1s.
RATE_INTERVAL = "61s"
# Panels nftproxy leaves empty, and why. The request-rate panels of other status classes show
# data only when such answers came (a healthy proxy gets 2xx), so they are not required.
NO_DATA = {
    "Goroutines": "go_goroutines is the Go runtime's gauge; nftproxy is Python (nftproxy/operator/metrics.py)",
}
OPTIONAL = {
    "Kube API Request Rate: 3xx": "no redirect comes from the API server",
    "Kube API Request Rate: 4xx": "only when a request is refused",
    "Kube API Request Rate: 5xx": "only when the API server fails a request",
    "Post Request Latency 99th Quantile": "nftproxy POSTs only a new ProxyStatus or an Event",
    "Get Request Latency 99th Quantile": "nftproxy GETs only to list, to start a watch (each renewed every "
    "5 minutes) and before its first ProxyStatus write",
}
DOWN_ALERTS = ("KubeProxyDown", "KubeProxyInstanceUnreachable", "NftproxyDown", "NftproxyTargetDown")


def log(s: str) -> None:
    print(s, flush=True)


def grafana_vars(query: str, cluster: str, instance: str) -> str:
    """A dashboard QUERY formatted with the mixin's config, then Grafana's variables substituted."""
    assert DASHBOARD["config"]["minimumTimeInterval"] == "1m"  # RATE_INTERVAL's premise
    q: str = (query % DASHBOARD["config"]).replace("$__rate_interval", RATE_INTERVAL)
    return q.replace("$cluster", cluster).replace("$instance", instance)


def shortened(doc: dict[str, Any]) -> dict[str, Any]:
    """A rule file with every rule's `for:` FOR, nothing else changed."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for g in out["groups"]:
        for r in g["rules"]:
            if "for" in r:
                r["for"] = FOR
    return out


def released(c: RealCluster) -> bool:
    return w.RELEASE in c.helm("list", "-n", w.NAMESPACE, "-q").split()


def uninstall_and_clean(c: RealCluster) -> None:
    """No release, no nftproxy pod, no nftproxy table on any node (as test_upgrade starts)."""
    if released(c):
        c.helm("uninstall", w.RELEASE, "-n", w.NAMESPACE, "--wait", "--timeout", "120s")
    eventually(lambda: not w.nftproxy_pods(c) or None, timeout=60, what="no nftproxy pod")
    for n in c.nodes:
        c.on_node(n.name, sys.executable, "-m", "nftproxy", "cleanup")


def prometheus_rbac() -> str:
    """A ServiceAccount with the read-only ClusterRole kube-prometheus gives its Prometheus for
    service discovery (prometheus-k8s: services, endpoints, pods; endpointslices)."""
    read = ["get", "list", "watch"]
    objs = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": SA_NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ROLE},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": read},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": SA_NAMESPACE}],
        },
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})


def workload(pod: str | None = None) -> str:
    """The Service WORKLOAD, or one more echo pod behind it (on node-1): EndpointSlice changes
    with a trigger time, which every node's nftproxy programs (syncs, network programming
    latency)."""
    if pod is None:
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": WORKLOAD, "namespace": "default"},
                "spec": {"selector": {"app": WORKLOAD}, "ports": [{"port": 80, "targetPort": "http"}]},
            }
        )
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "labels": {"app": WORKLOAD}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-1"},
                "terminationGracePeriodSeconds": 0,
                "containers": [w.echo_container()],
            },
        }
    )


def programming_counts(prom: Prometheus) -> dict[str, float]:
    """instance -> its network programming latencies observed, as last scraped."""
    q = f'sum by (instance) (kubeproxy_network_programming_duration_seconds_count{{job="{JOB}"}})'
    return {s["metric"]["instance"]: float(s["value"][1]) for s in prom.query(q)}


def free_port_in(c: RealCluster) -> int:
    """A TCP port free on 127.0.0.1 of the client namespace."""
    code = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
    out = subprocess.run(c.client_argv([sys.executable, "-c", code]), capture_output=True, text=True, check=True)
    return int(out.stdout)


def firing(prom: Prometheus, alert: str) -> list[dict[str, Any]]:
    return prom.query(f'ALERTS{{alertname="{alert}",alertstate="firing"}}')


def active(prom: Prometheus) -> dict[str, str]:
    """alert name -> its state (pending or firing), of every active alert."""
    return {a["labels"]["alertname"]: a["state"] for a in prom.active_alerts()}


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def monitored(cluster: RealCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """nftproxy installed with its monitoring, and Prometheus scraping it (see the docstring)."""
    c = cluster
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    for crd in CRDS:
        if not crd.exists():
            pytest.fail(f"{crd} is missing: run hack/crds.sh (hack/test.sh does)", pytrace=False)
    try:
        find_binary("prometheus")
    except ControlPlaneError as e:
        pytest.fail(f"{e} (PROM_TOOLS=prometheus hack/prom-tools.sh builds it)", pytrace=False)
    workdir = tmp_path_factory.mktemp("prometheus")
    prom = Prometheus(workdir, c.client_netns, c.client_argv([]), free_port_in(c), cgroup=f"{c.cgroup}/prometheus")
    try:
        uninstall_and_clean(c)
        for crd in CRDS:
            c.kubectl("apply", "--server-side", "-f", str(crd))
        c.kubectl("wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com",
                  "crd/prometheusrules.monitoring.coreos.com", "--timeout=30s")  # fmt: skip
        c.kubectl("apply", "-f", "-", input=prometheus_rbac())
        token = workdir / "token"
        token.write_text(c.kubectl("create", "token", SA, "-n", SA_NAMESPACE, "--duration=1h").strip())
        timings["clean start"] = time.monotonic() - t0
        w.helm_install(c, VALUES)
        timings["helm install"] = time.monotonic() - t0
        sm = c.kubectl_json("get", "servicemonitor", "-n", w.NAMESPACE, w.RELEASE)
        rule = c.kubectl_json("get", "prometheusrule", "-n", w.NAMESPACE, w.RELEASE)
        mixin = yaml.safe_load(MIXIN_RULES.read_text())
        sources = {"kubernetes-mixin-kube-proxy.yaml": mixin, "nftproxy-prometheusrule.yaml": prometheusrule_file(rule)}
        rule_files = {name: shortened(doc) for name, doc in sources.items()}
        scrape = servicemonitor_scrape_configs(
            sm,
            api_server=f"https://{APISERVER_IP}:{c.apiserver_port}",
            ca_file=c.dir / "cp" / "certs" / "ca.crt",
            token_file=token,
            scrape_interval=INTERVAL,
        )
        config = {
            "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
            "scrape_configs": scrape,
        }
        # the scrape manager applies discovery's changes every 5 s by default: 1 s here (time)
        prom.start(config, rule_files, flags=["--scrape.discovery-reload-interval=1s"])
        timings["prometheus ready"] = time.monotonic() - t0
        instances = {n.name: f"{n.ip}:10249" for n in c.nodes}

        def all_up() -> dict[str, dict[str, str]] | None:
            got = {s["metric"]["node"]: s["metric"] for s in prom.query(f'up{{job="{JOB}"}} == 1')}
            return got if set(got) == set(instances) else None

        up = eventually(all_up, timeout=60, what=f'up{{job="{JOB}"}} == 1 for every node')
        pods = {node: p["metadata"]["name"] for node, p in w.nftproxy_pods(c).items()}
        timings["every target up"] = time.monotonic() - t0
        # Latencies to observe, while Prometheus scrapes: a Service, then pods behind it, one at a
        # time, until every node's latency count has grown after its first scraped sample (the
        # histogram's series, per ip_family as kube-proxy's, appear with a node's first
        # observation: only a later one is an increase rate() sees). A pod's readiness is an
        # EndpointSlice change with a trigger time, but the controller stamps one only when it
        # is a whole second later than the last it recorded for the Service (trigger times are
        # in seconds): a pod Ready within the same second as the change before it is left
        # unstamped, hence a pause before each pod, and more than one pod when needed.
        c.kubectl("apply", "-f", "-", input=workload())
        first: dict[str, float] = {}

        def grown() -> dict[str, float] | None:
            now = programming_counts(prom)
            for i, n in now.items():
                first.setdefault(i, n)
            return now if all(now.get(i, 0) > first.get(i, math.inf) for i in instances.values()) else None

        for n in range(1, 5):
            time.sleep(1.1)
            pod = f"{WORKLOAD}-{n}"
            c.kubectl("apply", "-f", "-", input=workload(pod))
            c.kubectl("wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=60s")
            try:
                eventually(grown, timeout=5, what=f"{pod}'s network programming observed on every node, scraped")
                break
            except AssertionError:
                if n == 4:
                    raise
        log(f"    {n} pods behind the Service until every node's latency count grew")
        timings["workload programmed"] = time.monotonic() - t0
        yield {
            "prometheus": prom,
            "instances": instances,
            "up": up,
            "pods": pods,
            "sources": sources,
            "rule_files": rule_files,
            "scrape": scrape,
            "sm": sm,
            "timings": timings,
            "t0": t0,
        }
    finally:
        prom.stop()
        c.kubectl("delete", "service", WORKLOAD, "-n", "default", "--wait=false", check=False)
        c.kubectl("delete", "pod", "-l", f"app={WORKLOAD}", "-n", "default", "--wait=false", check=False)
        uninstall_and_clean(c)
        c.kubectl("delete", "--ignore-not-found", "-f", "-", input=prometheus_rbac(), check=False)
        for crd in CRDS:
            c.kubectl("delete", "--ignore-not-found", "-f", str(crd), check=False)
        log(
            f"    test_monitoring: {time.monotonic() - t0:.1f}s in all; "
            + ", ".join(f"{k} at {v:.1f}s" for k, v in timings.items())
        )


@pytest.fixture(scope="module")
def scaled_away(monitored: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """The DaemonSet given a nodeSelector no node matches: its pods go, and with them the targets.
    When each down alert was first seen firing, in seconds after the patch."""
    c, prom = cluster, monitored["prometheus"]
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"nftproxy.io/e2e-no-such-node": "true"}}}}}
    t = time.monotonic()
    c.kubectl("patch", "daemonset", "nftproxy", "-n", w.NAMESPACE, "--type=merge", "-p", json.dumps(patch))
    seen: dict[str, float] = {}

    def down() -> dict[str, float] | None:
        if "targets gone" not in seen and not prom.query(f'up{{job="{JOB}"}}'):
            seen["targets gone"] = time.monotonic() - t
        for alert in ("KubeProxyDown", "NftproxyDown"):
            if alert not in seen and firing(prom, alert):
                seen[alert] = time.monotonic() - t
        return seen if {"KubeProxyDown", "NftproxyDown"} <= set(seen) else None

    eventually(down, timeout=90, what="KubeProxyDown and NftproxyDown firing")
    monitored["timings"]["down alerts firing"] = time.monotonic() - monitored["t0"]
    log("    scaled away: " + ", ".join(f"{k} after {v:.1f}s" for k, v in seen.items()) + f" (for: {FOR})")
    out: dict[str, Any] = {"seen": seen, "pods": w.nftproxy_pods(c), "active": active(prom)}
    return out


# ---------------------------------------------------------------------------------------------- checks


def test_prometheus_scrapes_every_node_under_the_job_the_mixin_selects(monitored: dict[str, Any]) -> None:
    """The targets' labels are the operator's for the ServiceMonitor: job from the metrics
    Service's nftproxy.io/prometheus-job label (kube-proxy), namespace, service, endpoint, pod,
    container, and the chart's node."""
    sm, up, instances = monitored["sm"], monitored["up"], monitored["instances"]
    assert sm["spec"]["jobLabel"] == "nftproxy.io/prometheus-job"
    [job] = monitored["scrape"]
    assert job["job_name"] == f"serviceMonitor/{w.NAMESPACE}/{w.RELEASE}/0"
    for node, labels in up.items():
        assert labels["job"] == JOB
        assert labels["instance"] == instances[node]
        assert labels["namespace"] == w.NAMESPACE
        assert labels["service"] == f"{w.RELEASE}-metrics"
        assert labels["endpoint"] == "metrics"
        assert labels["container"] == "nftproxy"
        assert labels["pod"] == monitored["pods"][node]


def test_the_rules_loaded_are_the_mixins_and_the_charts_with_only_for_shortened(monitored: dict[str, Any]) -> None:
    sources, loaded = monitored["sources"], monitored["rule_files"]
    for name, src in sources.items():
        got = loaded[name]
        assert [g["name"] for g in got["groups"]] == [g["name"] for g in src["groups"]]
        for g_src, g_got in zip(src["groups"], got["groups"], strict=True):
            for r_src, r_got in zip(g_src["rules"], g_got["rules"], strict=True):
                assert {k: v for k, v in r_got.items() if k != "for"} == {k: v for k, v in r_src.items() if k != "for"}
                assert r_got["for"] == FOR
    prom: Prometheus = monitored["prometheus"]
    rules = prom.rules()
    want = [r["alert"] for doc in sources.values() for g in doc["groups"] for r in g["rules"]]
    assert sorted(r["name"] for r in rules) == sorted(want)
    assert len(want) == 2 + 7  # the mixin's kube-proxy alerts, the chart's
    for r in rules:
        assert r["health"] == "ok" and r["duration"] == 5, r


def test_every_query_of_the_mixins_proxy_dashboard_returns_data_for_every_node(monitored: dict[str, Any]) -> None:
    """The dashboard's variables as Grafana resolves them (no cluster label: $cluster is empty;
    $instance: every node's target, All is .+), then each panel's query: data (a finite number)
    for every node where the panel draws one line per target. NO_DATA lists what nftproxy cannot
    give; OPTIONAL what shows only when such requests happened."""
    prom: Prometheus = monitored["prometheus"]
    instances = set(monitored["instances"].values())
    var = DASHBOARD["variables"]
    assert prom.label_values(var["cluster"]["label"], grafana_vars(var["cluster"]["match"], "", "")) == []
    cluster = ""  # a variable without values
    got = prom.label_values(var["instance"]["label"], grafana_vars(var["instance"]["match"], cluster, ""))
    assert set(got) == instances
    report: dict[str, str] = {}
    missing: list[str] = []
    for panel in DASHBOARD["panels"]:
        title = panel["title"]
        query = grafana_vars(panel["query"], cluster, var["instance"]["all"])
        assert "$" not in query and "%(" not in query, query
        result = prom.query(query)
        finite = [s for s in result if math.isfinite(float(s["value"][1]))]
        covered = {s["metric"].get("instance") for s in finite}
        if title in NO_DATA:
            report[title] = f"no data ({NO_DATA[title]})"
            assert not result, (title, result)  # if nftproxy exports it now, move it out of NO_DATA
            continue
        report[title] = f"{len(finite)} of {len(result)} series with data: " + ", ".join(
            f"{s['metric'].get('instance', '')}{s['metric'].get('ip_family', '')}={float(s['value'][1]):.4g}"
            for s in result
        )
        if title in OPTIONAL:
            continue
        if not finite or (panel.get("each_instance") and not instances <= covered):
            missing.append(f"{title}: {query} -> {result}")
    for title, what in report.items():
        log(f"    {title}: {what}")
    assert not missing, missing


def test_no_down_alert_is_active_while_nftproxy_runs(monitored: dict[str, Any]) -> None:
    prom: Prometheus = monitored["prometheus"]
    now = active(prom)
    log(f"    active alerts while nftproxy runs: {now or 'none'}")
    assert not {a: s for a, s in now.items() if a in DOWN_ALERTS}, now
    for alert in DOWN_ALERTS:
        assert not firing(prom, alert)


def test_scaling_the_daemonset_away_fires_kube_proxy_down_and_nftproxy_down(scaled_away: dict[str, Any]) -> None:
    assert scaled_away["pods"] == {}
    seen = scaled_away["seen"]
    assert seen["targets gone"] <= seen["KubeProxyDown"], seen
    assert seen["targets gone"] <= seen["NftproxyDown"], seen
    # a target gone is not a target down: the up == 0 alerts stay silent
    assert "NftproxyTargetDown" not in scaled_away["active"], scaled_away["active"]
    assert "KubeProxyInstanceUnreachable" not in scaled_away["active"], scaled_away["active"]
