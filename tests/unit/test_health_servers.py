"""The health servers over HTTP, as kube-proxy's answer: /healthz and /livez (any method, Go's 404
elsewhere), and a healthCheckNodePort on a real loopback listener (any path and method, the
endpoint-weight header, 503 while the proxy is unhealthy). The rule itself: test_proxy_health.py."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from ipaddress import ip_network

from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestClient

from nftproxy.compiler import ProxyConfig
from nftproxy.operator.health import HealthCheckServers, healthz_handler
from nftproxy.operator.syncer import Syncer
from testkit.k8s import objects as k
from tests.support.syncer import make

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
JSON = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}


async def synced(node: k.Obj | None) -> Syncer:
    syncer, _ = make(sync_period=30.0)
    if node is not None:
        syncer.changes.node_changed(node)
    syncer.changes.mark_loaded()
    await syncer.sync_once()
    return syncer


async def ask(syncer: Syncer, requests: list[tuple[str, str]]) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    client: TestClient[web.BaseRequest, None]
    async with TestClient(RawTestServer(healthz_handler(syncer))) as client:
        for method, path in requests:
            resp = await client.request(method, path)
            out.append((resp.status, dict(resp.headers), await resp.read()))
    return out


def _headers(h: dict[str, str], *names: str) -> dict[str, str]:
    return {n: h[n] for n in names if n in h}


def test_healthz_and_livez_answer_every_method_with_kube_proxys_json() -> None:
    async def go() -> list[tuple[int, dict[str, str], bytes]]:
        syncer = await synced(k.node("n1", {"InternalIP": "198.18.0.1"}))
        return await ask(syncer, [(m, p) for p in ("/healthz", "/livez") for m in METHODS])

    answers = asyncio.run(go())
    for (status, headers, body), (method, path) in zip(
        answers, [(m, p) for p in ("/healthz", "/livez") for m in METHODS], strict=True
    ):
        assert status == 200, (method, path)
        assert _headers(headers, "Content-Type", "X-Content-Type-Options") == JSON, (method, path)
        if method == "HEAD":
            assert body == b""
            continue
        got = json.loads(body)
        keys = ["lastUpdated", "currentTime", "nodeEligible", "healthy", "status"]
        assert list(got) == (keys if path == "/healthz" else [k for k in keys if k != "nodeEligible"])
        assert got["healthy"] is True and set(got["status"]) == {"IPv4", "IPv6"}


def test_healthz_is_503_without_the_node_livez_is_not() -> None:
    async def go() -> list[tuple[int, dict[str, str], bytes]]:
        syncer = await synced(None)  # kube-proxy's NodeEligible: no Node is not eligible
        return await ask(syncer, [("GET", "/healthz"), ("GET", "/livez")])

    (hz, _, hz_body), (lz, _, _) = asyncio.run(go())
    assert (hz, lz) == (503, 200)
    assert json.loads(hz_body)["nodeEligible"] is False and json.loads(hz_body)["healthy"] is True


def test_healthz_and_livez_are_503_once_a_change_waited_two_sync_periods() -> None:
    async def go() -> list[tuple[int, dict[str, str], bytes]]:
        syncer = await synced(k.node("n1", {"InternalIP": "198.18.0.1"}))
        syncer.health.queued_update(time.monotonic() - 61)  # queued 61 s ago, never synced
        return await ask(syncer, [("GET", "/healthz"), ("POST", "/livez")])

    (hz, _, hz_body), (lz, _, lz_body) = asyncio.run(go())
    assert (hz, lz) == (503, 503)
    for body in (hz_body, lz_body):
        got = json.loads(body)
        assert got["healthy"] is False and {f["healthy"] for f in got["status"].values()} == {False}
        assert got["lastUpdated"] != got["currentTime"]  # the last update, not now


def test_other_paths_are_gos_404() -> None:
    async def go() -> list[tuple[int, dict[str, str], bytes]]:
        syncer = await synced(k.node("n1", {"InternalIP": "198.18.0.1"}))
        return await ask(syncer, [("GET", "/"), ("GET", "/healthz/"), ("POST", "/metrics")])

    for status, headers, body in asyncio.run(go()):
        assert status == 404 and body == b"404 page not found\n"
        assert _headers(headers, "Content-Type", "X-Content-Type-Options") == {
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(port: int, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request(method, path, body=b"x" if method in ("POST", "PUT") else None)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_a_health_check_port_answers_every_method_and_path_with_the_weight_and_the_proxys_health() -> None:
    port = _free_port()
    healthy = [True]
    hc = HealthCheckServers(None, "n", lambda: healthy[0])
    loopback = ProxyConfig(nodeport_addresses=(ip_network("127.0.0.1/32"),))
    requests = [(m, "/") for m in METHODS] + [("GET", "/healthz"), ("GET", "/any/path?x=1")]

    async def scenario() -> list[list[tuple[int, dict[str, str], bytes]]]:
        loop = asyncio.get_running_loop()

        async def all_requests() -> list[tuple[int, dict[str, str], bytes]]:
            return [await loop.run_in_executor(None, _request, port, m, p) for m, p in requests]

        seen = []
        try:
            await hc.update({port: ("shop/web", {4: 3})}, loopback)
            seen.append(await all_requests())
            healthy[0] = False  # kube-proxy's rule says unhealthy: every health port drains
            seen.append(await all_requests())
            healthy[0] = True
            await hc.update({port: ("shop/web", {4: 0})}, loopback)
            seen.append(await all_requests())
        finally:
            await hc.close()
        return seen

    ok, unhealthy, none = asyncio.run(scenario())
    body = (
        b'{\n\t"service": {\n\t\t"namespace": "shop",\n\t\t"name": "web"\n\t},\n'
        b'\t"localEndpoints": 3,\n\t"serviceProxyHealthy": true\n}'
    )
    names = ("Content-Type", "X-Content-Type-Options", "X-Load-Balancing-Endpoint-Weight")
    for (method, path), (status, headers, got) in zip(requests, ok, strict=True):
        assert status == 200, (method, path)
        assert _headers(headers, *names) == {**JSON, "X-Load-Balancing-Endpoint-Weight": "3"}
        assert got == (b"" if method == "HEAD" else body), (method, path)
        assert headers["Content-Length"] == str(len(body))
    for (method, _), (status, headers, got) in zip(requests, unhealthy, strict=True):
        assert status == 503 and headers["X-Load-Balancing-Endpoint-Weight"] == "3"
        assert got == (b"" if method == "HEAD" else body.replace(b"true", b"false"))
    for (method, _), (status, headers, got) in zip(requests, none, strict=True):
        assert status == 503 and headers["X-Load-Balancing-Endpoint-Weight"] == "0"
        if method != "HEAD":
            assert json.loads(got)["localEndpoints"] == 0
