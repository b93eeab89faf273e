"""The metrics server's URLs as kube-proxy's (upstream e2e "Networking should check kube-proxy
urls" asks /proxyMode on the metrics port): /metrics in Prometheus' format, /proxyMode the mode;
/configz, /flagz and /statusz as kube-proxy v1.37 serves them."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace

from aiohttp.test_utils import TestClient, TestServer

from nftproxy import __version__
from nftproxy.cli import kubeproxy_config, parse_args
from nftproxy.cli.flags import flag_values, settings_from_args
from nftproxy.operator.health import metrics_app
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.settings import Settings


async def get(path: str) -> tuple[int, str]:
    async with TestClient(TestServer(metrics_app(Metrics()))) as client:
        resp = await client.get(path)
        return resp.status, await resp.text()


def test_proxy_mode_and_metrics() -> None:
    assert asyncio.run(get("/proxyMode")) == (200, "nftables")
    status, body = asyncio.run(get("/metrics"))
    assert status == 200 and "kubeproxy_sync_proxy_rules_duration_seconds" in body
    # the process's own (the kubernetes-mixin's Proxy dashboard draws its memory and CPU)
    values = dict(line.split(" ", 1) for line in body.splitlines() if line.startswith("process_"))
    assert float(values["process_resident_memory_bytes"]) > 10e6  # a Python process: tens of MB
    assert float(values["process_cpu_seconds_total"]) > 0
    assert asyncio.run(get("/nothing"))[0] == 404


def test_apiserver_requests_are_exported_as_client_gos_rest_client_metrics() -> None:
    """rest_client_requests_total{code, method, host} and rest_client_request_duration_seconds
    {verb, host} with client-go's buckets (k8s.io/component-base metrics/prometheus/restclient),
    as the kubernetes-mixin's proxy dashboard reads them; a watch is counted, not timed."""
    metrics = Metrics()
    metrics.api_request("GET", "200", "10.0.0.1:6443", 0.02)
    metrics.api_request("PATCH", "409", "10.0.0.1:6443", 0.3)
    metrics.api_request("GET", "200", "10.0.0.1:6443", None)  # a watch
    metrics.api_request("GET", "<error>", "10.0.0.1:6443", 30.0)
    value = metrics.registry.get_sample_value
    host = {"host": "10.0.0.1:6443"}
    assert value("rest_client_requests_total", {"code": "200", "method": "GET", **host}) == 2
    assert value("rest_client_requests_total", {"code": "409", "method": "PATCH", **host}) == 1
    assert value("rest_client_requests_total", {"code": "<error>", "method": "GET", **host}) == 1
    assert value("rest_client_request_duration_seconds_count", {"verb": "GET", **host}) == 2
    assert value("rest_client_request_duration_seconds_bucket", {"verb": "GET", "le": "0.025", **host}) == 1
    (family,) = [f for f in metrics.registry.collect() if f.name == "rest_client_request_duration_seconds"]
    bounds = sorted({float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")})
    assert bounds == [0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, float("inf")]


# Every metric the kubernetes-mixin's Proxy dashboard queries (dashboards/proxy.libsonnet, at
# commit aa38e2bfa7ea6ec6870420b483046afe790a6411), besides `up` (Prometheus' own)
MIXIN_PROXY_DASHBOARD = [
    "kubeproxy_sync_proxy_rules_duration_seconds_count",
    "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
    "kubeproxy_network_programming_duration_seconds_count",
    "kubeproxy_network_programming_duration_seconds_bucket",
    "rest_client_requests_total",
    "rest_client_request_duration_seconds_bucket",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
    "go_goroutines",
]


def test_the_mixins_proxy_dashboard_finds_every_metric_but_go_goroutines() -> None:
    """nftproxy is not a Go program: the dashboard's Goroutines panel stays empty (no stand-in
    is exported under a Go runtime metric's name); every other panel has its series."""
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",)}
    exported = {f.name + s for f in Metrics().registry.collect() for s in suffixes.get(f.type, ("",))}
    assert [m for m in MIXIN_PROXY_DASHBOARD if m not in exported] == ["go_goroutines"]


def served(settings: Settings, *paths: str) -> list[tuple[int, str, str]]:
    async def go() -> list[tuple[int, str, str]]:
        async with TestClient(TestServer(metrics_app(Metrics(), settings))) as client:
            out = []
            for path in paths:
                resp = await client.get(path)
                out.append((resp.status, resp.headers["Content-Type"], await resp.text()))
            return out

    return asyncio.run(go())


def test_configz_flagz_and_statusz_as_kube_proxys() -> None:
    args = parse_args(["run", "--node-name", "n1", "--masquerade-bit", "3"])
    settings = replace(
        settings_from_args(args), configz=kubeproxy_config.effective(args, None), flagz=flag_values(args)
    )
    (configz, flagz, statusz) = served(settings, "/configz", "/flagz", "/statusz")
    status, kind, body = configz
    assert (status, kind) == (200, "application/json; charset=utf-8")
    config = json.loads(body)["kubeproxy.config.k8s.io"]
    assert (config["apiVersion"], config["kind"]) == ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration")
    assert config["nftables"]["masqueradeBit"] == 3 and config["hostnameOverride"] == "n1"
    status, kind, body = flagz
    assert status == 200 and kind.startswith("text/plain")
    lines = body.splitlines()
    assert lines[1] == "nftproxy flagz" and lines[2].startswith("Warning: This endpoint is not meant to be machine")
    assert "masquerade-bit=3" in lines and "node-name=n1" in lines
    status, kind, body = statusz
    assert status == 200 and kind.startswith("text/plain")
    assert "\nnftproxy statusz\n" in body and f"Binary version: {__version__}\n" in body
    assert "Paths: /configz /flagz /metrics /proxyMode /statusz" in body
    assert re.search(r"^Up: 0 hr 00 min 0\d sec$", body, re.M)
