"""A real Prometheus server (hack/prom-tools.sh builds it) configured as prometheus-operator
configures one from a ServiceMonitor and a PrometheusRule, for the tests that scrape nftproxy.

* ``servicemonitor_scrape_configs``: the scrape configs prometheus-operator v0.85.0 generates for a
  ServiceMonitor (pkg/prometheus/promcfg.go, generateServiceMonitorConfig, with the default
  Prometheus: serviceDiscoveryRole Endpoints, one shard, no scrape class, no enforced namespace
  label), for the fields a ServiceMonitor uses here; any other field is refused (KeyError names it)
  rather than silently left out. The operator's Prometheus runs in the cluster and reads the API
  with its pod's ServiceAccount; a Prometheus outside gets the API server, its CA and a token
  (what the operator's ``apiserverConfig`` renders into kubernetes_sd_configs).
* ``prometheusrule_file``: a PrometheusRule's groups as the rule file the operator writes (its
  spec.groups, unchanged).
* ``Prometheus``: the server, started detached (its own session, in a cgroup of the caller's
  choosing) in a network namespace (an argv prefix such as ``nsenter --net=...``), its data in a
  directory of the caller's; queried over its HTTP API from inside that namespace (no
  subprocess: the socket is created there); stopped by PID.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from testkit.k8s.controlplane import find_binary
from testkit.k8s.kubeproxy import http_get_in
from testkit.realcluster import procs

OPERATOR_VERSION = "v0.85.0"  # hack/crds.sh's PROMETHEUS_OPERATOR_VERSION: the CRDs and this mapping

Obj = dict[str, Any]

# The endpoint fields the mapping below renders as the operator does; anything else is refused.
_ENDPOINT_FIELDS = {"port", "path", "interval", "relabelings"}
_SPEC_FIELDS = {"jobLabel", "selector", "namespaceSelector", "endpoints"}
_RELABEL_FIELDS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "modulus": "modulus",
    "replacement": "replacement",
    "action": "action",
}


def _sanitize(name: str) -> str:
    """promcfg.go's sanitizeLabelName: every character outside [a-zA-Z0-9_] becomes _."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _refuse_unknown(what: str, obj: Obj, known: set[str]) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        raise KeyError(f"{what}: {unknown} not rendered by this mapping of prometheus-operator {OPERATOR_VERSION}")


def servicemonitor_scrape_configs(
    sm: Obj,
    *,
    api_server: str,
    ca_file: Path,
    token_file: Path,
    scrape_interval: str | None = None,
) -> list[Obj]:
    """SM's scrape configs, one per endpoint, in the operator's order of relabelings (see the
    module's docstring). SCRAPE_INTERVAL replaces the endpoints' interval (a test scrapes faster)."""
    spec = sm["spec"]
    _refuse_unknown("ServiceMonitor spec", spec, _SPEC_FIELDS)
    selector = spec["selector"]
    _refuse_unknown("ServiceMonitor selector", selector, {"matchLabels"})
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [sm["metadata"]["namespace"]]
    out: list[Obj] = []
    for i, ep in enumerate(spec["endpoints"]):
        _refuse_unknown("ServiceMonitor endpoint", ep, _ENDPOINT_FIELDS)
        cfg: Obj = {
            "job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/{i}",
            "honor_labels": False,
            "kubernetes_sd_configs": [
                {
                    "role": "endpoints",
                    "namespaces": {"names": namespaces},
                    "api_server": api_server,
                    "authorization": {"credentials_file": str(token_file)},
                    "tls_config": {"ca_file": str(ca_file)},
                }
            ],
        }
        if interval := scrape_interval or ep.get("interval"):
            cfg["scrape_interval"] = interval
        if "path" in ep:
            cfg["metrics_path"] = ep["path"]
        relabel: list[Obj] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        for k, v in sorted(selector.get("matchLabels", {}).items()):
            relabel.append(
                {
                    "action": "keep",
                    "source_labels": [
                        f"__meta_kubernetes_service_label_{_sanitize(k)}",
                        f"__meta_kubernetes_service_labelpresent_{_sanitize(k)}",
                    ],
                    "regex": f"({v});true",
                }
            )
        if "port" in ep:
            relabel.append(
                {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"]}
            )
        target = ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"]
        kind = {"source_labels": target, "separator": ";"}
        relabel += [
            {**kind, "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
            {**kind, "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        ]  # fmt: skip
        if job_label := spec.get("jobLabel"):
            relabel.append(
                {
                    "source_labels": [f"__meta_kubernetes_service_label_{_sanitize(job_label)}"],
                    "target_label": "job",
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        if "port" in ep:
            relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
        for r in ep.get("relabelings", []):
            _refuse_unknown("relabeling", r, set(_RELABEL_FIELDS))
            relabel.append({_RELABEL_FIELDS[k]: (v.lower() if k == "action" else v) for k, v in r.items()})
        # appendShardingRelabelingWithAddress, with one shard: the config reloader substitutes
        # $(SHARD) with 0
        relabel += [
            {"source_labels": ["__address__", "__tmp_hash"], "target_label": "__tmp_hash", "regex": "(.+);",
             "replacement": "$1", "action": "replace"},
            {"source_labels": ["__tmp_hash"], "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
            {"source_labels": ["__tmp_hash", "__tmp_disable_sharding"], "regex": "0;|.+;.+", "action": "keep"},
        ]  # fmt: skip
        cfg["relabel_configs"] = relabel
        out.append(cfg)
    return out


def prometheusrule_file(rule: Obj) -> Obj:
    """A PrometheusRule as the rule file the operator writes: its groups, unchanged."""
    return {"groups": rule["spec"]["groups"]}


class PrometheusError(RuntimeError):
    pass


class Prometheus:
    """One Prometheus server in a network namespace (see the module's docstring)."""

    def __init__(
        self,
        workdir: Path,
        netns: str,
        prefix: Sequence[str],
        port: int,
        *,
        cgroup: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.netns = netns
        self.prefix = list(prefix)
        self.port = port
        self.cgroup = cgroup
        self.pid: int | None = None
        self.log = workdir / "prometheus.log"
        self.data = workdir / "data"

    def start(self, config: Obj, rule_files: dict[str, Obj], flags: Sequence[str] = (), timeout: float = 30.0) -> None:
        """Write CONFIG (rule_files added) and the RULE_FILES (name -> rule file), start the
        server (FLAGS: more command-line flags) and wait until it is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name, doc in rule_files.items():
            (self.workdir / name).write_text(yaml.safe_dump(doc, sort_keys=False))
        config = {**config, "rule_files": [str(self.workdir / n) for n in rule_files]}
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        if self.cgroup:
            procs.make_cgroup(self.cgroup)
        argv = [
            *self.prefix,
            str(find_binary("prometheus")),
            f"--config.file={self.workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.data}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=info",
            *flags,
        ]
        self.pid = procs.spawn(argv, self.log, self.cgroup)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not procs.ours(self.pid, str(self.workdir)):
                raise PrometheusError(f"prometheus exited; {self.log}:\n{self.log.read_text()[-3000:]}")
            try:
                status, _ = http_get_in(self.netns, "127.0.0.1", self.port, "/-/ready", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus not ready after {timeout}s; {self.log}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM by PID (only while its command line still names the work directory)."""
        if self.pid is not None:
            procs.stop(self.pid, str(self.workdir), timeout=10)
            self.pid = None

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/PATH?PARAMS: its ``data`` (PrometheusError unless status is success)."""
        url = f"/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get_in(self.netns, "127.0.0.1", self.port, url, timeout=10)
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise PrometheusError(f"{url}: {status} {body[:500]}")
        return doc["data"]

    def query(self, expr: str) -> list[Obj]:
        """An instant query's result (a vector's samples)."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: a {data['resultType']}, not a vector")
        result: list[Obj] = data["result"]
        return result

    def label_values(self, label: str, match: str) -> list[str]:
        """Grafana's label_values(MATCH, LABEL): /api/v1/label/LABEL/values?match[]=MATCH."""
        values: list[str] = self.api(f"label/{urllib.parse.quote(label)}/values", **{"match[]": match})
        return values

    def active_alerts(self) -> list[Obj]:
        """The alerts pending or firing now (/api/v1/alerts)."""
        alerts: list[Obj] = self.api("alerts")["alerts"]
        return alerts

    def rules(self) -> list[Obj]:
        """Every loaded rule (/api/v1/rules), with its group's name under ``group``."""
        return [{**r, "group": g["name"]} for g in self.api("rules")["groups"] for r in g["rules"]]
