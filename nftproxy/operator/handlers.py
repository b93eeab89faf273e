"""kopf handlers: each hands its object to the change tracker in one call (no rules, no writes to
watched objects); and the start of our own Service and EndpointSlice watches (``reflector``).

kopf watches this node's Node and the ServiceCIDRs; the Services and EndpointSlices, ~all of the
events, are watched by ``reflector`` in protobuf, as kube-proxy's informers watch them (kopf's
per-object worker tasks and JSON cost ~2x kube-proxy's CPU under churn).

Nothing here writes to Services, EndpointSlices or Nodes: event handlers (``on.event``) store
no state on objects, and kopf runs standalone (no peering objects).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import tenacity

from nftproxy import heap
from nftproxy.operator import kube, restclient
from nftproxy.operator.changes import object_key
from nftproxy.operator.credentials import Credentials
from nftproxy.operator.kopf_import import inventory, kopf
from nftproxy.operator.kube import Prefetch
from nftproxy.operator.reflector import IDLE_SECONDS, SERVICES, SLICES, WATCH_SECONDS, Event, Reflector, Resource
from nftproxy.operator.settings import Settings
from nftproxy.operator.status import StatusWriter
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.handlers")
T = TypeVar("T")
NODES = ("", "v1", "nodes")


@dataclass
class Context:
    """Everything the handlers use, handed to kopf in its ``memo`` (``memo.nftproxy``)."""

    settings: Settings
    syncer: Syncer
    writer: StatusWriter
    api: Any
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # resourceVersion of our initial list, per resource: our watch starts there
    list_versions: dict[str, str] = field(default_factory=dict)
    prefetched: dict[str, Prefetch] = field(default_factory=dict)  # initial lists started early
    reflectors: list[Reflector] = field(default_factory=list)  # our Service and EndpointSlice watches


def memo_for(ctx: Context) -> kopf.Memo:
    """The operator-wide memo: kopf gives each handler a shallow copy, so all share ``ctx``."""
    return kopf.Memo(nftproxy=ctx)


def _ctx(memo: kopf.Memo) -> Context:
    ctx: Context = memo.nftproxy
    return ctx


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


class NoMemories(inventory.ResourceMemories):
    """kopf keeps a record per object it has had an event for (its per-object memo, daemons,
    index and error-throttling state: ~1 KB), forgotten only when the object is deleted (with
    Services and EndpointSlices in kopf's watches, at 10k Services the process grew by up to
    ~20 MB over the first minutes of churn, until every object had changed once). Our
    handlers are all ``on.event``: no daemons, timers, indexes or diff-bases, nothing to keep between two
    events of an object, so every record is ephemeral (made for one event, then dropped). The
    one thing lost: after an error in kopf's own processing of an object, its next error
    throttles from the first delay again, not the next one."""

    async def recall(
        self,
        raw_body: kopf.RawBody,
        *,
        memobase: Any = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> inventory.ResourceMemory:
        return await super().recall(raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.peering.standalone = True
    settings.posting.enabled = False  # our Events are explicit (status.StatusWriter)
    settings.scanning.disabled = True  # our resources are fixed: no CRD watch (least privilege)
    settings.watching.server_timeout = WATCH_SECONDS  # as our own watches'
    settings.watching.client_timeout = IDLE_SECONDS
    settings.watching.reconnect_backoff = 1.0
    settings.networking.error_backoffs = [1, 2, 5, 10, 20, 30]
    # kopf keeps a worker task per object while events flow (for the default 5 s)
    settings.queueing.idle_timeout = 0.2
    settings.watching.chunk_size = 500  # kopf's own lists (the ServiceCIDRs), page by page like ours
    settings.persistence.diffbase_storage = NoDiffBase()
    ctx = _ctx(memo)
    # Our own Node only, filtered by the apiserver (as kube-proxy): in a 5,000-node cluster the
    # other Nodes' status updates would be ~500 events/s, every one sent to every proxy.
    settings.watching.field_selectors[NODES] = f"metadata.name={ctx.settings.node_name}"
    if not ctx.syncer.changes.loaded.is_set():  # else listed (and synced) before kopf started: boot.py
        await initial_load(ctx)
    start_watches(ctx)


def start_watches(ctx: Context) -> None:
    """Our Service and EndpointSlice watches, each from its initial list's resourceVersion
    (a change made after the list is delivered, one the list had is skipped as already held:
    ``changes``); without one (not expected), the watch lists first."""
    loop = asyncio.get_running_loop()
    options = kube.service_options(ctx.settings.proxy.service_proxy_name)
    for resource in (SERVICES, SLICES):
        reflector = Reflector(
            ctx.api,
            resource,
            options if resource is SERVICES else kube.SLICE_OPTIONS,
            deliver(ctx, resource),
            loop,
            counted=ctx.syncer.metrics.watch_events.labels(resource.plural).inc,
            not_before=ctx.syncer.schedule.earliest,
        )
        reflector.start(ctx.list_versions.get(resource.plural))
        ctx.reflectors.append(reflector)


def stop_watches(ctx: Context) -> None:
    for reflector in ctx.reflectors:
        reflector.stop()


def deliver(ctx: Context, resource: Resource) -> Callable[[list[Event]], None]:
    """A batch of a watch's events (or a new list's pages) into the change tracker, in order."""
    changes = ctx.syncer.changes
    changed = changes.service_changed if resource.kind == "svc" else changes.slice_changed
    what = "Service" if resource.kind == "svc" else "EndpointSlice"

    def go(batch: list[Event]) -> None:
        for key, obj in batch:
            if key is not None:
                assert not isinstance(obj, set)
                changed(key, obj)
                continue
            assert isinstance(obj, set)  # a new list's keys: whatever is held and not there is gone
            for kind, held in sorted(changes.held()):
                if kind == resource.kind and held not in obj:
                    log.info("%s %s is gone (not in the new list): deleting it", what, held)
                    changed(held, None)

    return go


async def initial_load(ctx: Context) -> None:
    """List everything before the first sync: a restart never applies a half-empty table.

    ~10^6 objects are decoded and parsed, all alive until synced (``heap.bulk_decode``)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()

    async def read_node() -> dict[str, Any] | None:
        return await loop.run_in_executor(None, kube.read_node, ctx.api, ctx.settings.node_name)

    async def read_cidrs() -> list[dict[str, Any]] | Exception:
        """Best effort, once: without them only the drop of unallocated Service addresses waits
        (for kopf's watch), so a refused or failed list never holds up the first sync."""
        try:
            return await loop.run_in_executor(None, kube.service_cidrs, ctx.api)
        except Exception as e:
            return e

    async def read_version() -> dict[str, Any]:
        return await loop.run_in_executor(None, kube.server_version, ctx.api)

    with heap.bulk_decode():
        node_task = asyncio.create_task(_retrying("reading the Node", read_node))
        cidrs_task = asyncio.create_task(read_cidrs())
        version_task = asyncio.create_task(_retrying("reading the apiserver's version", read_version))
        n_services, n_slices = await relist(ctx, initial=True)
        node = await node_task
        version = await version_task
    log.info("initial lists: %d Services, %d EndpointSlices (%.1fs)", n_services, n_slices, time.monotonic() - started)
    if node is not None:
        ctx.writer.node_uid = node["metadata"].get("uid")
    ctx.syncer.changes.initial_lists(node, version, await cidrs_task)


async def relist(ctx: Context, initial: bool = False) -> tuple[int, int]:
    """Our own list of every Service and EndpointSlice, fed to the syncer; (Services, slices).

    Each page is parsed as it arrives (the raw objects of a 10k-Service list would be ~150 MB at
    once); versions already held are skipped. A retried list starts over; what only a failed
    attempt saw is forgotten again. The lists' resourceVersions are kept for our watches to
    start from (``start_watches``)."""
    loop = asyncio.get_running_loop()
    changes = ctx.syncer.changes
    held = changes.held()
    queued: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()
    options = kube.service_options(ctx.settings.proxy.service_proxy_name)

    def changed(kind: str) -> Any:
        return changes.service_changed if kind == "svc" else changes.slice_changed

    def version(plural: str) -> Callable[[str], None] | None:
        return (lambda v: ctx.list_versions.__setitem__(plural, v)) if initial else None

    async def feed(kind: str, pages: Iterator[list[dict[str, Any]]]) -> int:
        """Pages are fetched (and decoded) in a worker thread, the next one while this one is
        parsed here."""
        n = 0
        fetch = loop.run_in_executor(None, next, pages, None)
        while (page := await fetch) is not None:
            fetch = loop.run_in_executor(None, next, pages, None)
            for obj in page:
                ref = (kind, object_key(obj))
                seen.add(ref)
                changed(kind)(ref[1], obj)
            n += len(page)
        return n

    async def attempt() -> tuple[int, int]:
        seen.clear()
        try:
            if initial:
                ctx.list_versions.clear()
            # the lists started at process start (first attempt only), else lists of our own
            pre = {k: ctx.prefetched.pop(k) for k in list(ctx.prefetched)} if initial else {}
            svc_pages = (
                pre["svc"].pages() if "svc" in pre else kube.service_pages(ctx.api, version("services"), options)
            )
            slice_pages = (
                pre["slice"].pages()
                if "slice" in pre
                else kube.endpoint_slice_pages(ctx.api, version("endpointslices"), kube.SLICE_OPTIONS)
            )
            try:
                async with asyncio.TaskGroup() as tg:  # both lists at once: the apiserver works meanwhile
                    services = tg.create_task(feed("svc", svc_pages))
                    slices = tg.create_task(feed("slice", slice_pages))
            except ExceptionGroup as eg:
                raise eg.exceptions[0] from None  # the first failure, as a plain exception for the retry
            for kind, plural in (("svc", "services"), ("slice", "endpointslices")):
                if kind in pre and pre[kind].version is not None:
                    ctx.list_versions[plural] = str(pre[kind].version)
            return services.result(), slices.result()
        finally:
            queued.update(seen)

    counts = await _retrying("listing Services and EndpointSlices", attempt)
    for kind, key in sorted((held | queued) - seen):
        what = "Service" if kind == "svc" else "EndpointSlice"
        log.info("%s %s is gone (not in the list): deleting it", what, key)
        changed(kind)(key, None)
    return counts


async def _retrying(what: str, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
    retrying = tenacity.AsyncRetrying(
        wait=tenacity.wait_exponential(multiplier=0.5, max=10),
        before_sleep=lambda rs: log.warning("%s failed (%s); retrying", what, rs.outcome and rs.outcome.exception()),
    )
    result: T = await retrying(call)
    return result


@kopf.on.event(*NODES)
async def node_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Only our Node's events arrive (the watch's field selector, set at startup)."""
    ctx = _ctx(memo)
    ctx.syncer.metrics.watch_events.labels("nodes").inc()
    if body.get("metadata", {}).get("name") != ctx.settings.node_name:
        return
    if type == "DELETED":  # kube-proxy exits; nftproxy keeps its rules, and /healthz fails
        log.warning("Node %s was deleted: /healthz answers 503, the rules stay", ctx.settings.node_name)
        ctx.syncer.changes.node_deleted()
        return
    ctx.syncer.changes.node_changed(body)
    uid = body["metadata"].get("uid")
    if uid != ctx.writer.node_uid:
        ctx.writer.node_uid = uid
        ctx.syncer.changed.set()  # the ProxyStatus gets the Node as its owner


@kopf.on.event("networking.k8s.io", "v1", "servicecidrs")
async def service_cidr_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """The cluster's ServiceCIDRs: traffic to their unallocated addresses is dropped. A change is
    applied at the next sync (kube-proxy waits for its hourly full sync: a difference on purpose)."""
    ctx = _ctx(memo)
    ctx.syncer.metrics.watch_events.labels("servicecidrs").inc()
    ctx.syncer.changes.service_cidr_changed(body["metadata"]["name"], None if type == "DELETED" else body)


@kopf.on.probe(id="lastSync")
def last_sync(memo: kopf.Memo, **_: Any) -> str | None:
    t = _ctx(memo).syncer.status.last_success_time
    return t.isoformat() if t else None


@kopf.on.login()
async def login(memo: kopf.Memo, **_: Any) -> kopf.AiohttpSession:
    """kopf talks to the API with our client's credentials (``operator/credentials.py``: the
    kubeconfig or the in-cluster service account), through a session whose requests count in
    ``rest_client_*`` (``operator/restclient.py``). kopf logs in again after a 401: the token is
    read again then (a rotated service account token, an exec plugin's renewed one)."""
    ctx = _ctx(memo)
    return restclient.session(connection_info(ctx.api.credentials), ctx.syncer.metrics.api_request)


def connection_info(c: Credentials) -> kopf.ConnectionInfo:
    """Our credentials as kopf's."""
    header = c.authorization()
    scheme, token = header.split(" ", 1) if header and " " in header else (None, None)
    return kopf.ConnectionInfo(
        server=c.server,
        ca_path=c.ca_file,
        ca_data=c.ca_data,
        insecure=c.insecure or None,
        scheme=scheme,
        token=token,
        certificate_path=c.cert_file,
        certificate_data=c.cert_data,
        private_key_path=c.key_file,
        private_key_data=c.key_data,
        proxy_url=c.proxy,
    )
