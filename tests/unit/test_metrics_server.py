"""The metrics server's URLs as kube-proxy's (upstream e2e "Networking should check kube-proxy
urls" asks /proxyMode on the metrics port): /metrics in Prometheus' format, /proxyMode the mode."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from nftproxy.operator.health import metrics_app
from nftproxy.operator.metrics import Metrics


async def get(path: str) -> tuple[int, str]:
    async with TestClient(TestServer(metrics_app(Metrics()))) as client:
        resp = await client.get(path)
        return resp.status, await resp.text()


def test_proxy_mode_and_metrics() -> None:
    assert asyncio.run(get("/proxyMode")) == (200, "nftables")
    status, body = asyncio.run(get("/metrics"))
    assert status == 200 and "kubeproxy_sync_proxy_rules_duration_seconds" in body
    assert asyncio.run(get("/nothing"))[0] == 404
