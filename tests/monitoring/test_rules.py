"""The chart's alerts (charts/nftproxy/templates/prometheusrule.yaml), rendered by `helm template`
and checked by Prometheus' own promtool (hack/prom-tools.sh): `promtool check rules`, and
`promtool test rules` with series labelled as prometheus-operator labels the chart's
ServiceMonitor targets, every alert once firing and once not (nftproxy-alerts-test.yaml). And the
kubernetes-mixin's kube-proxy alerts (kubernetes-mixin-kube-proxy.yaml, verbatim), which select
`job="kube-proxy"`: under the chart's default job name they watch nftproxy's targets."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.helmchart import Helm, find

pytestmark = pytest.mark.monitoring

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RELEASE, NAMESPACE = "np", "kube-system"  # the release nftproxy-alerts-test.yaml's series name
MONITORING = {"metricsService.enabled": "true", "serviceMonitor.enabled": "true", "prometheusRule.enabled": "true"}
ALERTS = [
    "NftproxyDown",
    "NftproxyTargetDown",
    "NftproxyNotInSync",
    "NftproxySyncFailing",
    "NftproxyLastSyncTooOld",
    "NftproxyObjectsSkipped",
    "NftproxyKubeProxyRulesFound",
]

Obj = dict[str, Any]


def render(helm: Helm, **values: str) -> list[Obj]:
    return helm.template({**MONITORING, **values}, release=RELEASE, namespace=NAMESPACE)


def rules(objs: list[Obj]) -> Obj:
    """The PrometheusRule's spec, as a Prometheus rule file ({groups: [...]})."""
    return {"groups": find(objs, "PrometheusRule")["spec"]["groups"]}


def target_labels(objs: list[Obj], node: str, instance: str, pod: str) -> dict[str, str]:
    """A target's labels as prometheus-operator (v0.85.0, pkg/prometheus/promcfg.go) gives a
    ServiceMonitor's: job from the Service label its jobLabel names (else the Service's name),
    namespace, service, endpoint (the port's name), pod, container; plus the chart's relabeling
    (node, from the pod's node)."""
    sm, svc = find(objs, "ServiceMonitor"), find(objs, "Service")
    meta = svc["metadata"]
    job = meta["labels"].get(sm["spec"].get("jobLabel", ""), "") or meta["name"]
    relabel = sm["spec"]["endpoints"][0]["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in relabel
    return {
        "job": job,
        "namespace": meta["namespace"],
        "service": meta["name"],
        "endpoint": sm["spec"]["endpoints"][0]["port"],
        "instance": instance,
        "pod": pod,
        "container": "nftproxy",
        "node": node,
    }


def series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def promtool_test(promtool: Path, workdir: Path, files: dict[str, Obj]) -> subprocess.CompletedProcess[str]:
    """Writes ``files`` (name -> YAML) into ``workdir``, then `promtool test rules` the one named
    test.yaml."""
    for name, doc in files.items():
        (workdir / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return _run(promtool, workdir, "test", "rules", "test.yaml")


def _run(promtool: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=workdir, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_accepts_the_rules_and_every_alert_has_its_annotations_and_runbook(
    helm: Helm, promtool: Path, tmp_path: Path
) -> None:
    doc = rules(render(helm))
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc))
    res = _run(promtool, tmp_path, "check", "rules", "rules.yaml")
    assert res.returncode == 0 and f"SUCCESS: {len(ALERTS)} rules found" in res.stdout, res.stdout + res.stderr
    got = [r["alert"] for g in doc["groups"] for r in g["rules"]]
    assert got == ALERTS
    runbook = (REPO / "docs" / "operating.md").read_text()
    for rule in (r for g in doc["groups"] for r in g["rules"]):
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert f"Runbook: nftproxy docs/operating.md, {rule['alert']}." in rule["annotations"]["description"]
        assert re.search(rf"^#+ {rule['alert']}$", runbook, re.M), (
            f"no runbook section {rule['alert']} in docs/operating.md"
        )
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
    broken = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "up{"}]}]}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    res = _run(promtool, tmp_path, "check", "rules", "broken.yaml")  # and the check can fail
    assert res.returncode != 0


def test_each_alert_fires_when_it_should_and_not_otherwise(helm: Helm, promtool: Path, tmp_path: Path) -> None:
    """nftproxy-alerts-test.yaml against the rendered rules. Its series are labelled as the
    rendered ServiceMonitor's targets are, and every alert has a firing and a silent case."""
    objs = render(helm)
    test = yaml.safe_load((HERE / "nftproxy-alerts-test.yaml").read_text())
    assert test["rule_files"] == ["nftproxy-rules.yaml"]
    want = {
        frozenset(target_labels(objs, "n1", "192.0.2.1:10249", "np-nftproxy-a1b2c").items()),
        frozenset(target_labels(objs, "n2", "192.0.2.2:10249", "np-nftproxy-d3e4f").items()),
    }
    for case in test["tests"]:
        for s in case["input_series"]:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', s["series"]))
            labels.pop("ip_family", None)
            assert frozenset(labels.items()) in want, (case["name"], s["series"])
    firing: set[str] = set()
    silent: set[str] = set()
    for case in test["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert firing == silent == set(ALERTS)
    shutil.copy(HERE / "nftproxy-alerts-test.yaml", tmp_path / "test.yaml")
    res = promtool_test(promtool, tmp_path, {"nftproxy-rules.yaml": rules(objs)})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout, res.stdout
    # and the test can fail: an alert expected too early
    test["tests"][0]["alert_rule_test"][0]["exp_alerts"] = test["tests"][0]["alert_rule_test"][1]["exp_alerts"]
    res = promtool_test(promtool, tmp_path, {"test.yaml": test})
    assert res.returncode != 0 and "NftproxyDown" in res.stdout + res.stderr, res.stdout + res.stderr


def expected(rule_files: list[Obj], alert: str, labels: dict[str, str]) -> Obj:
    """One expected alert of a promtool test: ``labels`` and the rule's annotations (which must
    be plain text: no templates)."""
    (rule,) = [r for doc in rule_files for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert]
    assert not any("{{" in v for v in rule["annotations"].values()), rule
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": rule["annotations"]}


def _mixin_test(objs: list[Obj], up: str, fires: dict[str, list[Obj]]) -> Obj:
    """A promtool test: one nftproxy target (``up``: its values, one a minute) labelled as the
    rendered ServiceMonitor's, then at 25 minutes the alerts of ``fires`` (name -> expected)."""
    labels = target_labels(objs, "n1", "192.0.2.1:10249", "np-nftproxy-a1b2c")
    return {
        "rule_files": ["mixin.yaml", "nftproxy-rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": series("up", labels), "values": up}],
                "alert_rule_test": [
                    {"eval_time": "25m", "alertname": name, "exp_alerts": expected} for name, expected in fires.items()
                ],
            }
        ],
    }


def test_the_mixins_kube_proxy_alerts_watch_nftproxy_under_the_default_job_name(
    helm: Helm, promtool: Path, tmp_path: Path
) -> None:
    """With the chart's defaults (serviceMonitor.jobName kube-proxy), the mixin's KubeProxyDown
    stays silent while nftproxy's targets are up and fires once they are gone, as for
    kube-proxy's; KubeProxyInstanceUnreachable fires for an nftproxy target that does not answer."""
    objs = render(helm)
    mixin = yaml.safe_load((HERE / "kubernetes-mixin-kube-proxy.yaml").read_text())
    files = {"mixin.yaml": mixin, "nftproxy-rules.yaml": rules(objs)}
    both = list(files.values())
    labels = target_labels(objs, "n1", "192.0.2.1:10249", "np-nftproxy-a1b2c")
    up: dict[str, list[Obj]] = {"KubeProxyDown": [], "NftproxyDown": [], "KubeProxyInstanceUnreachable": []}
    gone = {
        "KubeProxyDown": [expected(both, "KubeProxyDown", {"job": "kube-proxy"})],
        "NftproxyDown": [expected(both, "NftproxyDown", {})],
    }
    unreachable = {"KubeProxyInstanceUnreachable": [expected(both, "KubeProxyInstanceUnreachable", labels)]}
    for values, fires in (("1x30", up), ("1 1 1 1 1 _x25", gone), ("0x30", unreachable)):
        res = promtool_test(promtool, tmp_path, {**files, "test.yaml": _mixin_test(objs, values, fires)})
        assert res.returncode == 0, f"{values}: {res.stdout}{res.stderr}"


def test_under_a_job_name_of_its_own_the_mixin_sees_no_proxy_and_the_charts_alert_watches_nftproxy(
    helm: Helm, promtool: Path, tmp_path: Path
) -> None:
    """serviceMonitor.jobName=nftproxy (kube-proxy beside nftproxy): nftproxy's targets are
    job="nftproxy", so the mixin's KubeProxyDown fires when no kube-proxy is scraped, although
    nftproxy is up, and the chart's NftproxyDown is what watches nftproxy."""
    objs = render(helm, **{"serviceMonitor.jobName": "nftproxy"})
    assert target_labels(objs, "n1", "192.0.2.1:10249", "p")["job"] == "nftproxy"
    mixin = yaml.safe_load((HERE / "kubernetes-mixin-kube-proxy.yaml").read_text())
    files = {"mixin.yaml": mixin, "nftproxy-rules.yaml": rules(objs)}
    both = list(files.values())
    fires = {"KubeProxyDown": [expected(both, "KubeProxyDown", {"job": "kube-proxy"})], "NftproxyDown": []}
    res = promtool_test(promtool, tmp_path, {**files, "test.yaml": _mixin_test(objs, "1x30", fires)})
    assert res.returncode == 0, res.stdout + res.stderr
    gone = {"NftproxyDown": [expected(both, "NftproxyDown", {})]}
    res = promtool_test(promtool, tmp_path, {**files, "test.yaml": _mixin_test(objs, "1 1 1 1 1 _x25", gone)})
    assert res.returncode == 0, res.stdout + res.stderr
