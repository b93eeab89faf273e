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
