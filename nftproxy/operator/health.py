"""/healthz (kube-proxy's contract) and /metrics, served from inside the programmed netns."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nftproxy.compiler.config import ProxyConfig
from nftproxy.nft.addresses import LocalAddresses
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.sockets import listening_socket
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.health")


def healthz_app(syncer: Syncer, node: str) -> web.Application:
    """kube-proxy's probes: ``/healthz`` is 200 while syncs succeed and the Node is eligible (not
    being deleted, not tainted for deletion by the cluster autoscaler: load balancers' health
    checks of the node then fail and drain it), ``/livez`` only on the syncs (a node being
    deleted must not restart its proxy). Each answer is counted as kube-proxy counts them."""

    def answer(eligible: bool | None) -> web.Response:
        ok, why = syncer.healthy()
        if eligible is not None and not eligible:
            ok, why = False, why if not ok else "the Node is being deleted (or tainted for deletion)"
        s = syncer.status
        body: dict[str, object] = {
            "lastUpdated": s.last_success_time.isoformat() if s.last_success_time else "",
            "currentTime": datetime.now(UTC).isoformat(),
            "nodeName": node,
            "healthy": ok,
            "message": why,
        }
        if eligible is not None:
            body["nodeEligible"] = eligible
        code = 200 if ok else 503
        (syncer.metrics.healthz if eligible is not None else syncer.metrics.livez).labels(str(code)).inc()
        return web.Response(status=code, text=json.dumps(body), content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        n = syncer.node
        return answer(n is not None and n.eligible)

    async def livez(_: web.Request) -> web.Response:
        return answer(None)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    return app


def metrics_app(metrics: Metrics) -> web.Application:
    async def serve(_: web.Request) -> web.Response:
        # in a thread: a collector may ask the kernel (the localhost NodePort counters)
        body = await asyncio.get_running_loop().run_in_executor(None, generate_latest, metrics.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def proxy_mode(_: web.Request) -> web.Response:
        # kube-proxy's metrics server says its mode here (upstream's e2e "should check kube-proxy
        # urls" and users' scripts ask it): the rules are nftables ones
        return web.Response(text="nftables")

    app = web.Application()
    app.router.add_get("/metrics", serve)
    app.router.add_get("/proxyMode", proxy_mode)
    return app


async def serve(app: web.Application, sock: socket.socket) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def _version(host: str) -> int:
    return 6 if ":" in host else 4


class HealthCheckServers:
    """healthCheckNodePort servers (the cloud load balancers' contract, as kube-proxy): on each
    port, 200 with the count of this node's endpoints of the Service, 503 when there are none.
    Each port is served on the addresses NodePorts are accepted on, as kube-proxy's
    (``ProxyConfig.health_check_addresses``), not on every address of the node; they are worked
    out again at every update, so a Node's or an interface's new address is bound and an old one
    closed."""

    def __init__(self, netns: str | None, node: str) -> None:
        self.netns = netns
        self.node = node
        self.state: dict[int, tuple[str, dict[int, int]]] = {}  # port -> (Service, {version: count})
        self.runners: dict[tuple[int, str], web.AppRunner] = {}  # (port, address) -> its server
        self.local = LocalAddresses(netns)

    def addresses(self, config: ProxyConfig) -> list[str]:
        nets = [config.nodeport_networks(v) for v in (4, 6)]
        matched = any(ns and all(n.prefixlen for n in ns) for ns in nets)  # matched against the node's
        return config.health_check_addresses(self.local.list() if matched else [])

    async def update(self, wanted: dict[int, tuple[str, dict[int, int]]], config: ProxyConfig) -> None:
        """Serve exactly these ports, each on the addresses ``config`` accepts NodePorts on of the
        families its Service has, with that family's count (kube-proxy's per-family servers). A
        listener that cannot be opened (a port or address taken) is logged and tried again at
        the next update; the others serve."""
        self.state = wanted
        hosts = self.addresses(config) if wanted else []
        want = {(port, h) for port, (_, fams) in wanted.items() for h in hosts if _version(h) in fams}
        for key in [k for k in self.runners if k not in want]:
            await self.runners.pop(key).cleanup()
        failed: list[str] = []
        for port, host in sorted(want - set(self.runners)):
            try:
                sock = listening_socket(host, port, self.netns, v6only=True)
            except OSError as e:
                failed.append(f"{host}:{port}: {e}")
                continue
            self.runners[(port, host)] = await serve(self._app(port, _version(host)), sock)
        if failed:
            log.warning("healthCheckNodePort listeners not opened (retried at the next sync): %s", "; ".join(failed))

    def _app(self, port: int, version: int) -> web.Application:
        async def answer(_: web.Request) -> web.Response:
            key, families = self.state.get(port, ("", {}))
            count = families.get(version, 0)
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
        self.local.close()
