"""The scrape config testkit.prometheus makes of the chart's ServiceMonitor, as prometheus-operator
v0.85.0 makes it (tests/e2e/test_monitoring.py runs a real Prometheus with it): Prometheus' own
`promtool check config` accepts it, `job` comes from the Service label the ServiceMonitor's
jobLabel names, the chart's `node` relabeling comes after the operator's, and a ServiceMonitor
field the mapping does not render is refused rather than dropped."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.prometheus import servicemonitor_scrape_configs
from tests.k8s.helmchart import Helm, find

pytestmark = pytest.mark.monitoring

MONITORING = {"metricsService.enabled": "true", "serviceMonitor.enabled": "true"}


def scrape_configs(sm: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    (tmp_path / "token").write_text("token\n")
    (tmp_path / "ca.crt").write_text("")
    return servicemonitor_scrape_configs(
        sm, api_server="https://192.0.2.1:6443", ca_file=tmp_path / "ca.crt", token_file=tmp_path / "token"
    )


def test_promtool_accepts_the_scrape_config_and_job_comes_from_the_job_label(
    helm: Helm, promtool: Path, tmp_path: Path
) -> None:
    objs = helm.template(MONITORING, release="np", namespace="kube-system")
    sm = find(objs, "ServiceMonitor")
    [job] = scrape_configs(sm, tmp_path)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [job]}))
    res = subprocess.run(
        [str(promtool), "check", "config", "prometheus.yml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert job["job_name"] == "serviceMonitor/kube-system/np-nftproxy/0"
    assert job["scrape_interval"] == "30s" and job["metrics_path"] == "/metrics"
    [sd] = job["kubernetes_sd_configs"]
    assert sd["role"] == "endpoints" and sd["namespaces"] == {"names": ["kube-system"]}
    relabel = job["relabel_configs"]
    by_service = {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"}
    by_label = {
        "source_labels": ["__meta_kubernetes_service_label_nftproxy_io_prometheus_job"],
        "target_label": "job",
        "regex": "(.+)",
        "replacement": "${1}",
    }
    node = {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"}
    assert relabel.index(by_service) + 1 == relabel.index(by_label) < relabel.index(node)
    port = {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": "metrics"}
    assert port in relabel
    svc = find(objs, "Service")
    for k, v in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][k] == v


def test_a_servicemonitor_field_the_mapping_does_not_render_is_refused(helm: Helm, tmp_path: Path) -> None:
    sm = find(helm.template(MONITORING), "ServiceMonitor")
    scrape_configs(sm, tmp_path)  # the chart's own: every field rendered
    for where, field in (("endpoint", "metricRelabelings"), ("spec", "targetLabels")):
        changed = copy.deepcopy(sm)
        (changed["spec"]["endpoints"][0] if where == "endpoint" else changed["spec"])[field] = []
        with pytest.raises(KeyError, match=field):
            scrape_configs(changed, tmp_path)
