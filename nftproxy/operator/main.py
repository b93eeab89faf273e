"""`nftproxy run`: wire the layers together, commit the first sync, then run kopf (standalone,
cluster-wide).

The start is in two parts (``boot``): first the lists (plain GETs started by the command at
process start), the Syncer and the first sync, with nothing of kopf, aiohttp or the Kubernetes
client imported; then those are imported, and the servers, the status writer, our Service and
EndpointSlice watches (``reflector``, at the lists' resourceVersions) and kopf's (the Node, the
ServiceCIDRs) start. The /healthz and /metrics sockets are bound before the
first sync (a taken port fails the start before the kernel is touched, as before); a probe that
connects meanwhile is answered once the first sync is in.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from nftproxy import __version__
from nftproxy.compiler import features
from nftproxy.dataplane import conntrack_sysctls, requirements
from nftproxy.dataplane.sync import Dataplane
from nftproxy.diagnose import counters
from nftproxy.nft.conntrack import Conntrack, KernelConntrack
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator import boot, config_watch, logs
from nftproxy.operator.early import Lists
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.settings import Settings
from nftproxy.operator.sockets import Claim, ListenError, listening_socket
from nftproxy.operator.syncer import Status, Syncer

if TYPE_CHECKING:
    from nftproxy.operator.kube import Prefetch
    from nftproxy.operator.leaving import Verdict

log = logging.getLogger("nftproxy")


def run(
    settings: Settings,
    api: Any = None,
    prefetched: dict[str, Prefetch] | None = None,
    lists: Lists | None = None,
) -> int:
    """``lists``: the first lists, started at process start (``early``); without them,
    ``prefetched`` lists through ``api`` (``kube.Client``: ours, for every call but kopf's watches)."""
    logs.setup(settings.log_level, settings.log_format)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per event is too much
    # once each at start, as kube-proxy's "Version info" and its configuration: the version, then
    # the effective configuration (a KubeProxyConfiguration, also on /configz) as one JSON line
    log.info("nftproxy version %s", __version__)
    if settings.configz:
        log.info("configuration: %s", json.dumps(settings.configz, sort_keys=True, separators=(",", ":")))
    for warning in settings.config_warnings:
        log.warning("%s", warning)
    backend = KernelBackend(settings.netns)
    try:
        started = time.perf_counter()
        requirements.check(backend.probe)  # the kernel and nf_tables, before anything on the node changes
        log.debug("this node can run nftproxy (checked in %.1f ms)", (time.perf_counter() - started) * 1000)
        if settings.conntrack is not None:  # as kube-proxy, at start (Settings built in tests: None)
            conntrack_sysctls.apply(settings.conntrack, settings.netns)
        conntrack = KernelConntrack(settings.netns)
        claim = Claim(settings.proxy.table, settings.netns)  # the node's tables are this process's
        try:
            verdict = asyncio.run(_main(settings, backend, api, prefetched or {}, lists, conntrack, claim))
        finally:
            conntrack.close()
        if verdict is not None and verdict.leaving:  # no sync runs any more (the loop's threads are joined)
            claim.release()  # a new nftproxy on this node may claim them now: then they stay
            _leave(settings, backend, verdict, claim)
            return 0
    finally:
        backend.close()
    why = f" ({verdict.why})" if verdict is not None else ""
    log.info("stopped; the nftables rules stay in place%s", why)
    return 0


def _leave(settings: Settings, backend: KernelBackend, verdict: Verdict, claim: Claim) -> None:
    """Leaving this node for good: another proxy awaited (bounded), then our tables removed."""
    from nftproxy.migration import Presence, detect  # noqa: PLC0415
    from nftproxy.operator.leaving import leave  # noqa: PLC0415

    log.info("stopping, and leaving this node for good: %s", verdict.why)
    dataplane = Dataplane(backend, settings.proxy)

    def remove() -> list[str]:
        return [f"table {f.value} {settings.proxy.table}" for f in dataplane.cleanup()]

    try:

        def serving() -> Presence | None:  # another proxy's Services are programmed here
            found = detect(settings.netns)
            return found if found is not None and found.serving else None

        leave(serving, remove, claim)
    except Exception as e:  # e.g. the kernel refused: what is left stays, as at any other stop
        log.error("could not remove nftproxy's tables (they stay): %s", e)


_STOPPED = boot.Loaded({}, None, synced=False)  # a signal came during the first sync
RETRY_LISTEN = 5.0  # seconds between two tries to listen, as kube-proxy's servers


def _listen(what: str, address: tuple[str, int] | None, settings: Settings) -> socket.socket | None:
    """The server's listening socket; when the address is taken or wrong: with
    --bind-address-hard-fail the start fails (OSError), else, as kube-proxy, the error is logged
    and the server is tried again every RETRY_LISTEN seconds (``_serve_later``)."""
    if address is None:
        return None
    try:
        return listening_socket(*address, settings.netns)
    except OSError as e:
        if settings.bind_address_hard_fail:
            raise ListenError(f"the {what} server cannot listen on {_where(address)}: {e.strerror or e}") from e
        log.error(
            "the %s server cannot listen on %s: %s (tried again every %gs)",
            what, _where(address), e.strerror or e, RETRY_LISTEN,
        )  # fmt: skip
        return None


def _where(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _serve_later(what: str, address: tuple[str, int], app: Any, settings: Settings, runners: list[Any]) -> None:
    from nftproxy.operator import health  # noqa: PLC0415  (aiohttp: after the first sync)

    while True:
        await asyncio.sleep(RETRY_LISTEN)
        try:
            sock = listening_socket(*address, settings.netns)
        except OSError as e:
            log.debug("the %s server still cannot listen on %s: %s", what, _where(address), e)
            continue
        runners.append(await health.serve(app, sock))
        log.info("the %s server listens on %s", what, _where(address))
        return


async def _claim_later(claim: Claim) -> None:
    while not claim.take():
        await asyncio.sleep(0.5)
    log.info("the tables of this node are claimed by this nftproxy")


async def _first_sync(syncer: Syncer, lists: Lists) -> boot.Loaded | None:
    """``boot.first_sync``, SIGTERM and SIGINT held until it is done (kopf handles them later):
    the first load is not cut half-way, and the process then stops without starting kopf."""
    loop = asyncio.get_running_loop()
    signals: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signals.append, sig)
    try:
        loaded = await boot.first_sync(syncer, lists)
        await asyncio.sleep(0)  # a signal that arrived meanwhile: its handler runs now
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return _STOPPED if signals else loaded


async def _main(
    settings: Settings,
    backend: KernelBackend,
    api: Any,
    prefetched: dict[str, Prefetch],
    lists: Lists | None = None,
    conntrack: Conntrack | None = None,
    claim: Claim | None = None,
) -> Verdict | None:
    """Runs until stopped; then, with --daemonset, whether this proxy is leaving its node for good.
    ``claim``: taken now, or as soon as a previous nftproxy leaving this node releases it."""
    metrics = Metrics()
    if claim is not None and not claim.take():
        log.info("another nftproxy on this node is stopping: its tables are adopted (claimed once it is gone)")
    if lists is not None:  # its lists run since the process started: counted from now on
        lists.api.on_request = metrics.api_request
    syncer = Syncer(Dataplane(backend, settings.proxy, conntrack), settings, metrics)
    metrics.in_sync.set_function(lambda: float(syncer.in_sync()))
    healthz_sock = _listen("health", settings.healthz, settings)
    metrics_sock = _listen("metrics", settings.metrics, settings)
    loaded = await _first_sync(syncer, lists) if lists is not None else None
    if loaded is _STOPPED:
        log.info("stopped during the first sync (SIGTERM or SIGINT)")
        return None

    # -- the first sync is in (or was tried): now kopf and aiohttp (not the Kubernetes client) --
    from nftproxy.localhost_proxy import LocalhostNodePorts, localhost_rejections, raise_fd_limit  # noqa: PLC0415
    from nftproxy.operator import handlers, health, kube  # noqa: PLC0415
    from nftproxy.operator.kopf_import import kopf  # noqa: PLC0415
    from nftproxy.operator.kubeproxy_watch import KubeProxyWatch  # noqa: PLC0415
    from nftproxy.operator.leaving import DaemonSetWatch, ask  # noqa: PLC0415
    from nftproxy.operator.status import StatusWriter  # noqa: PLC0415

    api = api or kube.connect(settings.kubeconfig)
    api.on_request = metrics.api_request
    writer = StatusWriter(api, syncer, settings.node_name, settings.status_period)
    ctx = handlers.Context(settings, syncer, writer, api, prefetched=prefetched)
    if loaded is not None:  # our watches start at these lists' versions
        ctx.list_versions.update(loaded.versions)
        writer.node_uid = loaded.node_uid

    runners: list[Any] = []
    apps: list[tuple[str, tuple[str, int] | None, socket.socket | None, Any]] = [
        ("health", settings.healthz, healthz_sock, health.healthz_handler(syncer)),
        ("metrics", settings.metrics, metrics_sock, health.metrics_app(metrics, settings)),
    ]
    retried = []
    for what, address, sock, app in apps:
        if sock is not None:
            runners.append(await health.serve(app, sock))
        elif address is not None:  # could not listen (not --bind-address-hard-fail): tried again
            retried.append(asyncio.create_task(_serve_later(what, address, app, settings, runners), name=what))
    hc = health.HealthCheckServers(settings.netns, settings.node_name, lambda: syncer.proxy_health().healthy)

    async def health_checks(status: Status) -> None:
        try:
            await hc.update(status.health_checks, syncer.dp.config)  # the config with the Node merged in
        except OSError as e:  # e.g. the addresses not readable: the proxy goes on
            logging.getLogger("nftproxy.health").warning("healthCheckNodePort: %s", e)

    syncer.on_synced.append(health_checks)
    lh = LocalhostNodePorts(settings.netns, metrics)  # --nodeport-addresses localhost (listens only then)
    asked = settings.proxy.with_gates(features.DEFAULTS)  # localhost asked for, whatever the gate's default
    if any(asked.localhost_nodeports(v) for v in (4, 6)):
        before, after = raise_fd_limit()
        log.info("localhost NodePorts served on loopback (file descriptor limit %d -> %d)", before, after)

    async def localhost_nodeports(status: Status) -> None:
        try:
            await lh.update(status.localhost_nodeports)
        except Exception as e:  # the proxy's trouble never fails a sync; tried again at the next
            logging.getLogger("nftproxy.localhost").warning("localhost NodePorts not updated: %s", e)

    syncer.on_synced.append(localhost_nodeports)
    if loaded is not None and loaded.synced:  # what the hooks would have done after the first sync
        for hook in syncer.on_synced:
            await hook(syncer.status)
    metrics.count_localhost_rejections(lambda: localhost_rejections(backend, syncer.dp.config))
    if settings.proxy.service_counters:  # --service-counters: nftproxy_service_*_total
        metrics.count_service_traffic(lambda: counters.read_families(backend, syncer.dp.config.table))
    tasks = [asyncio.create_task(syncer.run(), name="syncer"), asyncio.create_task(writer.run(), name="status")]
    daemonset = None  # our DaemonSet, watched: is a stop a departure from this node for good?
    if settings.daemonset and settings.daemonset_namespace:
        daemonset = DaemonSetWatch(api, settings.daemonset_namespace, settings.daemonset)
        daemonset.start()
    watch = KubeProxyWatch(  # kube-proxy's rules on this node? (and, if asked, its leftovers removed)
        settings.netns,
        settings.kube_proxy_check_period,
        cleanup=settings.cleanup_kube_proxy,
        service_proxy_name=settings.proxy.service_proxy_name,
        leaving=functools.partial(ask, api, daemonset, settings.node_name) if daemonset is not None else None,
    )
    tasks.append(asyncio.create_task(watch.run(syncer, api, settings.node_name), name="kube-proxy-watch"))
    log.info(
        "nftproxy %s on node %s%s",
        settings.proxy.table,
        settings.node_name,
        f" (netns {settings.netns})" if settings.netns else "",
    )
    tasks += retried
    if claim is not None and claim.sock is None:
        tasks.append(asyncio.create_task(_claim_later(claim), name="claim"))
    if settings.config_file:  # as kube-proxy: a changed file stops the proxy, to start with it
        tasks.append(asyncio.create_task(config_watch.watch(settings.config_file), name="config-watch"))
    stopped = False
    try:
        await kopf.operator(
            standalone=True,
            clusterwide=True,
            liveness_endpoint=settings.kopf_liveness,
            memo=handlers.memo_for(ctx),
            memories=handlers.NoMemories(),
        )
        stopped = True  # (an error out of kopf is no departure: the rules stay)
    finally:
        handlers.stop_watches(ctx)  # started by the startup handler
        tasks += ctx.tasks
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for r in runners:
            await r.cleanup()
        await hc.close()
        await lh.close()
    if daemonset is None or not stopped:
        return None
    daemonset.stop()
    return await asyncio.get_running_loop().run_in_executor(None, ask, api, daemonset, settings.node_name)
