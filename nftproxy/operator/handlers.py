"""kopf handlers: they only feed the syncer's queue (no rules, no writes to watched objects).

Nothing here writes to Services, EndpointSlices or Nodes: event handlers (``on.event``) store
no state on objects, and kopf runs standalone (no peering objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf
import tenacity

from nftproxy.operator import kube
from nftproxy.operator.settings import Settings
from nftproxy.operator.status import StatusWriter
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.handlers")
T = TypeVar("T")


@dataclass
class Context:
    settings: Settings
    syncer: Syncer
    writer: StatusWriter
    api: Any
    events_during_relist: set[tuple[str, str]] | None = None  # kopf events seen while we list
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


CTX: Context | None = None  # set by operator.main before kopf starts


def _ctx() -> Context:
    assert CTX is not None, "nftproxy.operator.main sets the context before kopf runs"
    return CTX


class NoDiffBase(kopf.DiffBaseStorage):
    """Our handlers are all ``on.event``: kopf never compares or stores a diff-base for them, yet it
    builds one per event by deep-copying the object (~60 µs per EndpointSlice, a quarter of its
    per-event cost when it replays 20k objects at start). Nothing is stored: objects stay as is."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.peering.standalone = True
    settings.posting.enabled = False  # our Events are explicit (status.StatusWriter)
    settings.scanning.disabled = True  # our resources are fixed: no CRD watch (least privilege)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.reconnect_backoff = 1.0
    settings.networking.error_backoffs = [1, 2, 5, 10, 20, 30]
    # kopf keeps a worker task per object while events flow; its replay of 20k objects at start
    # holds them all for the default 5 s (measured: ~50 MB more at 10k Services than with 0.2 s).
    settings.queueing.idle_timeout = 0.2
    # kopf's own initial list, page by page like ours (one 10k-Service list is ~150 MB decoded).
    settings.watching.chunk_size = 500
    settings.persistence.diffbase_storage = NoDiffBase()
    ctx = _ctx()
    await initial_load(ctx)
    ctx.tasks.append(asyncio.create_task(relist_periodically(ctx), name="relist"))
    # kopf starts its watches when this returns, and first replays its own full list (~1 ms per
    # object): let the first sync run before that, not competing with it for the interpreter.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.syncer.first_sync.wait(), timeout=120)


async def initial_load(ctx: Context) -> None:
    """List everything before the first sync: a restart never applies a half-empty table."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    n_services, n_slices = await relist(ctx)

    async def read_node() -> dict[str, Any] | None:
        return await loop.run_in_executor(None, kube.read_node, ctx.api, ctx.settings.node_name)

    node = await _retrying("reading the Node", read_node)
    if node is None:
        log.warning("Node %s not found: NodePorts wait for it", ctx.settings.node_name)
    else:
        ctx.syncer.node_changed(node)
        ctx.writer.node_uid = node["metadata"].get("uid")
    log.info("initial lists: %d Services, %d EndpointSlices (%.1fs)", n_services, n_slices, time.monotonic() - started)
    ctx.syncer.mark_loaded()


async def relist(ctx: Context) -> tuple[int, int]:
    """Our own list of every Service and EndpointSlice, fed to the syncer; (Services, slices).

    Each page is parsed as it arrives (the raw objects of a 10k-Service list would be ~150 MB at
    once); versions already held are skipped. Besides the initial load, this runs every
    RELIST_PERIOD: kopf never reports an object deleted while its watch was away (after "410
    Gone" it lists again and replays only what exists), so whatever we hold that the list lacks
    is deleted, unless kopf delivered an event for it during the list (newer than the list). A
    retried list starts over; what only a failed attempt saw is forgotten again."""
    loop = asyncio.get_running_loop()
    held = ctx.syncer.held()
    queued: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()
    events = ctx.events_during_relist = set()

    def changed(kind: str) -> Any:
        return ctx.syncer.service_changed if kind == "svc" else ctx.syncer.slice_changed

    async def feed(kind: str, pages: Iterator[list[dict[str, Any]]]) -> int:
        n = 0
        while (page := await loop.run_in_executor(None, next, pages, None)) is not None:
            for obj in page:
                ref = (kind, _key(obj))
                seen.add(ref)
                if ref not in events:  # else kopf's event is newer than this list
                    changed(kind)(ref[1], obj)
            n += len(page)
        return n

    async def attempt() -> tuple[int, int]:
        seen.clear()
        try:
            n_services = await feed("svc", kube.service_pages(ctx.api))
            return n_services, await feed("slice", kube.endpoint_slice_pages(ctx.api))
        finally:
            queued.update(seen)

    try:
        counts = await _retrying("listing Services and EndpointSlices", attempt)
        for kind, key in sorted((held | queued) - seen - events):
            what = "Service" if kind == "svc" else "EndpointSlice"
            log.info("%s %s is gone (not in the list): deleting it", what, key)
            changed(kind)(key, None)
        return counts
    finally:
        ctx.events_during_relist = None


RELIST_PERIOD = 3600.0  # like the hourly full sync: repairs what a long watch outage missed


async def relist_periodically(ctx: Context) -> None:
    while True:
        await asyncio.sleep(RELIST_PERIOD)
        try:
            await relist(ctx)
        except Exception as e:  # never fatal: the watches go on, and the next period retries
            log.warning("periodic list failed: %s", e)


async def _retrying(what: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
    retrying = tenacity.AsyncRetrying(
        wait=tenacity.wait_exponential(multiplier=0.5, max=10),
        before_sleep=lambda rs: log.warning("%s failed (%s); retrying", what, rs.outcome and rs.outcome.exception()),
    )
    result: T = await retrying(call)
    return result


def _key(obj: Any) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"


@kopf.on.event("", "v1", "services")
async def service_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    ctx = _ctx()
    if ctx.events_during_relist is not None:
        ctx.events_during_relist.add(("svc", _key(body)))
    ctx.syncer.service_changed(_key(body), None if type == "DELETED" else body)


@kopf.on.event("discovery.k8s.io", "v1", "endpointslices")
async def slice_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    ctx = _ctx()
    if ctx.events_during_relist is not None:
        ctx.events_during_relist.add(("slice", _key(body)))
    ctx.syncer.slice_changed(_key(body), None if type == "DELETED" else body)


def _is_my_node(name: str, **_: Any) -> bool:
    return CTX is not None and name == CTX.settings.node_name


@kopf.on.event("", "v1", "nodes", when=_is_my_node)
async def node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
    if type != "DELETED":
        ctx = _ctx()
        ctx.syncer.node_changed(body)
        ctx.writer.node_uid = body["metadata"].get("uid")


@kopf.on.probe(id="lastSync")
def last_sync(**_: Any) -> str | None:
    t = _ctx().syncer.status.last_success_time
    return t.isoformat() if t else None


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf talks to the API with the same credentials as our client (--kubeconfig or in-cluster)."""
    cfg = _ctx().api.configuration
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    scheme, token = header.split(" ", 1) if header and " " in header else (None, header)
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme or ("Bearer" if token else None),
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )
