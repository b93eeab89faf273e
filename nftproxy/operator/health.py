"""/healthz (kube-proxy's contract) and /metrics, served from inside the programmed netns."""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nftproxy.nft import netns as netns_mod
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.syncer import Syncer


def listening_socket(host: str, port: int, netns: str | None) -> socket.socket:
    """A listening TCP socket created inside ``netns`` (a socket keeps its namespace)."""
    result: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            if netns:
                netns_mod.enter(netns)  # this throwaway thread only
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # "::" serves both families
            s.bind((host, port))
            s.listen(64)
            s.setblocking(False)
            result.append(s)
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=make, name="netns-socket")
    t.start()
    t.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def healthz_app(syncer: Syncer, node: str) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        ok, why = syncer.healthy()
        s = syncer.status
        body = {
            "lastUpdated": s.last_success_time.isoformat() if s.last_success_time else "",
            "currentTime": datetime.now(UTC).isoformat(),
            "nodeName": node,
            "healthy": ok,
            "message": why,
        }
        return web.Response(status=200 if ok else 503, text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    return app


def metrics_app(metrics: Metrics) -> web.Application:
    async def serve(_: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(metrics.registry))
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    app = web.Application()
    app.router.add_get("/metrics", serve)
    return app


async def serve(app: web.Application, sock: socket.socket) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


class HealthCheckServers:
    """healthCheckNodePort servers (the cloud load balancers' contract, as kube-proxy): on each
    port, 200 with the count of this node's endpoints of the Service, 503 when there are none."""

    def __init__(self, netns: str | None, node: str) -> None:
        self.netns = netns
        self.node = node
        self.state: dict[int, tuple[str, int]] = {}
        self.runners: dict[int, web.AppRunner] = {}

    async def update(self, wanted: dict[int, tuple[str, int]]) -> None:
        self.state = wanted
        for port in [p for p in self.runners if p not in wanted]:
            await self.runners.pop(port).cleanup()
        for port in [p for p in wanted if p not in self.runners]:
            try:
                sock = listening_socket("::", port, self.netns)
            except OSError:
                sock = listening_socket("0.0.0.0", port, self.netns)
            self.runners[port] = await serve(self._app(port), sock)

    def _app(self, port: int) -> web.Application:
        async def answer(_: web.Request) -> web.Response:
            key, count = self.state.get(port, ("", 0))
            ns, name = key.split("/", 1) if "/" in key else ("", key)
            body = {"service": {"namespace": ns, "name": name}, "localEndpoints": count, "serviceProxyHealthy": True}
            return web.Response(status=200 if count else 503, text=json.dumps(body), content_type="application/json")

        app = web.Application()
        app.router.add_get("/{tail:.*}", answer)
        return app

    async def close(self) -> None:
        for runner in self.runners.values():
            await runner.cleanup()
        self.runners.clear()
