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
    assert asyncio.run(get("/nothing"))[0] == 404


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
