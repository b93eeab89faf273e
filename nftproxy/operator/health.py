"""/healthz (kube-proxy's contract) and /metrics, served from inside the programmed netns."""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import socket
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from nftproxy import __version__
from nftproxy.compiler.config import ProxyConfig
from nftproxy.nft.addresses import LocalAddresses
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.proxy_health import NOT_FOUND, Answer, proxy_answer, service_answer
from nftproxy.operator.settings import Settings
from nftproxy.operator.sockets import listening_socket
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.health")


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def _response(answer: Answer) -> web.Response:
    status, headers, body = answer
    return web.Response(status=status, headers=headers, body=body)


def healthz_handler(syncer: Syncer) -> Handler:
    """kube-proxy's probes (proxy_health.py has the rule and the bodies): ``/healthz`` is 503
    while the proxy is unhealthy or the Node not eligible (being deleted, or tainted for deletion
    by the cluster autoscaler: load balancers' health checks of the node then fail and drain it),
    ``/livez`` only on the proxy's health (a node being deleted must not restart its proxy). Any
    method, as kube-proxy's ServeMux; any other path is Go's 404. Each answer is counted as
    kube-proxy counts them."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.path == "/healthz":
            n = syncer.changes.node
            eligible: bool | None = n is not None and n.eligible
            counter = syncer.metrics.healthz
        elif request.path == "/livez":
            eligible, counter = None, syncer.metrics.livez
        else:
            return _response(NOT_FOUND)
        status, headers, body = proxy_answer(syncer.proxy_health(time.monotonic()), time.time_ns(), eligible)
        counter.labels(str(status)).inc()
        return _response((status, headers, body))

    return handle


_ZPAGE_WARNING = (
    "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees "
    "and is for debugging purposes only."
)


def _uptime(seconds: float) -> str:
    """As statusz's: ``3 hr 02 min 09 sec``."""
    s = int(seconds)
    return f"{s // 3600} hr {s // 60 % 60:02d} min {s % 60:02d} sec"


def metrics_app(metrics: Metrics, settings: Settings | None = None) -> web.Application:
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

    started = time.time()
    configz = dict(settings.configz) if settings else {}
    flagz = dict(settings.flagz) if settings else {}

    async def serve_configz(_: web.Request) -> web.Response:
        # as kube-proxy's (k8s.io/component-base/configz): every registered configuration under
        # its group's name; kube-proxy's: the effective KubeProxyConfiguration, v1alpha1
        return web.json_response({"kubeproxy.config.k8s.io": configz}, dumps=lambda o: json.dumps(o, sort_keys=True))

    async def serve_flagz(_: web.Request) -> web.Response:
        # as kube-proxy's /flagz (k8s.io/apiserver/pkg/server/flagz, text/plain): every flag, sorted
        lines = [f"{name}={value}" for name, value in sorted(flagz.items())]
        return web.Response(text="\nnftproxy flagz\n" + _ZPAGE_WARNING + "\n\n" + "".join(f"{x}\n" for x in lines))

    async def serve_statusz(_: web.Request) -> web.Response:
        # as kube-proxy's /statusz (k8s.io/apiserver/pkg/server/statusz, text/plain)
        paths = " ".join(sorted({r.resource.canonical for r in app.router.routes() if r.resource is not None}))
        text = (
            f"\nnftproxy statusz\n{_ZPAGE_WARNING}\n\n"
            f"Started: {time.strftime('%a %b %e %H:%M:%S %Z %Y', time.localtime(started))}\n"
            f"Up: {_uptime(time.time() - started)}\n"
            f"Python version: {platform.python_version()}\n"
            f"Binary version: {__version__}\n"
            f"Paths: {paths}\n"
        )
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", serve)
    app.router.add_get("/proxyMode", proxy_mode)
    app.router.add_get("/configz", serve_configz)
    app.router.add_get("/flagz", serve_flagz)
    app.router.add_get("/statusz", serve_statusz)
    return app


async def serve(app: web.Application | Handler, sock: socket.socket) -> web.BaseRunner:
    """``app`` on ``sock``: an Application (routes), or one handler for every request (as a Go
    http.Server without a mux: any path, any method)."""
    runner: web.BaseRunner
    if isinstance(app, web.Application):
        runner = web.AppRunner(app, access_log=None)
    else:
        runner = web.ServerRunner(web.Server(app, access_log=None))
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def _version(host: str) -> int:
    return 6 if ":" in host else 4


class HealthCheckServers:
    """healthCheckNodePort servers (the cloud load balancers' contract, as kube-proxy): on each
    port, any path and any method, 200 with the count of this node's ready endpoints of the
    Service (also in ``X-Load-Balancing-Endpoint-Weight``), 503 when there are none or while
    the proxy is unhealthy (``proxy_healthy``: kube-proxy's rule, proxy_health.py).
    Each port is served on the addresses NodePorts are accepted on, as kube-proxy's
    (``ProxyConfig.health_check_addresses``), not on every address of the node; they are worked
    out again at every update, so a Node's or an interface's new address is bound and an old one
    closed."""

    def __init__(self, netns: str | None, node: str, proxy_healthy: Callable[[], bool]) -> None:
        self.netns = netns
        self.node = node
        self.proxy_healthy = proxy_healthy
        self.state: dict[int, tuple[str, dict[int, int]]] = {}  # port -> (Service, {version: count})
        self.runners: dict[tuple[int, str], web.BaseRunner] = {}  # (port, address) -> its server
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
            self.runners[(port, host)] = await serve(self._handler(port, _version(host)), sock)
        if failed:
            log.warning("healthCheckNodePort listeners not opened (retried at the next sync): %s", "; ".join(failed))

    def _handler(self, port: int, version: int) -> Handler:
        async def answer(_: web.BaseRequest) -> web.StreamResponse:
            key, families = self.state.get(port, ("", {}))
            ns, name = key.split("/", 1) if "/" in key else ("", key)
            return _response(service_answer(ns, name, families.get(version, 0), self.proxy_healthy()))

        return answer

    async def close(self) -> None:
        for runner in self.runners.values():
            await runner.cleanup()
        self.runners.clear()
        self.local.close()
