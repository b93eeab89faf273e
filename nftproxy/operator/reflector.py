"""Our own watches of Services and EndpointSlices, as client-go's Reflector makes kube-proxy's.

Each resource is watched in protobuf (``wire``) by a thread of its own, from the resourceVersion
of the list the first sync was made of (``boot``, ``handlers.initial_load``: one initial-list
path), with the selectors of kube-proxy's informers (``kube.service_options``,
``kube.SLICE_OPTIONS``): the apiserver filters, and sends DELETED when an object stops matching.
Bookmarks keep the version fresh between changes. A watch that ends (its ``timeoutSeconds``)
starts again from the last version seen; one that fails is retried from there with a growing
delay (``tenacity``); one whose version is too old for the apiserver ("410 Gone", e.g. after an
etcd outage) lists everything again, and whatever we hold that the new list lacks is deleted
(client-go's Replace): no update and no deletion is ever lost.

The events are handed to the event loop in batches: one ``call_soon_threadsafe`` for whatever
arrived while the loop was busy (one wake-up per object cost ~20% of the CPU under churn at 10k
Services, with kopf's watch). A batch is held until the next sync may start (``not_before``:
``--min-sync-period`` after the last one's start, ``Schedule.earliest``): under churn the loop
wakes once per sync for all the events since, not once per event, and no change is synced any
later than it would have been. With no sync in the window (the usual case between bursts) a
change goes to the loop at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import tenacity

from nftproxy.operator import kube, wire
from nftproxy.operator.changes import object_key

log = logging.getLogger("nftproxy.watch")

WATCH_SECONDS = 300  # the apiserver ends each watch after this (timeoutSeconds), as kube-proxy's 5-10 min
IDLE_SECONDS = WATCH_SECONDS + 30  # no byte for this long (not even a bookmark): the watch is dead

# (key, the object as a lean dict, None when deleted); or (None, the keys of a whole new list):
# whatever is held and not among them is gone.
Event = tuple[str, dict[str, Any] | None] | tuple[None, set[str]]


@dataclass(frozen=True)
class Resource:
    kind: str  # the change tracker's: "svc", "slice"
    plural: str  # the metrics' and logs' name
    path: str
    wire: wire.Kind

    def pages(
        self, api: kube.Client, on_version: Callable[[str], None] | None, options: kube.Query
    ) -> Iterator[list[dict[str, Any]]]:
        """Its list (``kube.service_pages``, ``kube.endpoint_slice_pages``: the one list of each)."""
        pages = kube.service_pages if self.kind == "svc" else kube.endpoint_slice_pages
        return pages(api, on_version, options)


SERVICES = Resource("svc", "services", kube.SERVICES, wire.SERVICES)
SLICES = Resource("slice", "endpointslices", kube.SLICES, wire.SLICES)


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class Reflector:
    """One resource: a watch from ``version``, in a thread; its events to ``deliver`` (called on
    ``loop``, in order, a batch at a time)."""

    def __init__(
        self,
        api: kube.Client,
        resource: Resource,
        options: kube.Query,
        deliver: Callable[[list[Event]], None],
        loop: asyncio.AbstractEventLoop,
        counted: Callable[[], None] = lambda: None,
        watch_seconds: int = WATCH_SECONDS,
        not_before: Callable[[], float] = lambda: -math.inf,
    ) -> None:
        self.api = api
        self.resource = resource
        self.options = options  # the selectors of its list and watch
        self.deliver = deliver
        self.loop = loop
        self.counted = counted  # told of each watch event (bookmarks aside): the watch_events metric
        self.watch_seconds = watch_seconds
        self.not_before = not_before  # (time.monotonic) a batch is held until then: Schedule.earliest
        self.version: str | None = None  # the last seen: the next watch starts there
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._batch: list[Event] = []
        self._scheduled = False
        self._thread: threading.Thread | None = None

    def start(self, version: str | None) -> None:
        """Watch from ``version`` (None: list first)."""
        self.version = version
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watch-{self.resource.plural}")
        self._thread.start()

    def stop(self) -> None:
        """No event delivered from now on (the thread ends at its watch's next byte or end)."""
        self.stopped.set()

    # -- in the thread

    def _run(self) -> None:
        retrying = tenacity.Retrying(
            wait=tenacity.wait_exponential(multiplier=0.5, max=10),
            retry=tenacity.retry_if_exception(lambda _: not self.stopped.is_set()),
            sleep=self._sleep,
            before_sleep=lambda rs: log.warning(
                "watching %s failed (%s); retrying", self.resource.plural, rs.outcome and rs.outcome.exception()
            ),
        )
        while not self.stopped.is_set():
            try:
                retrying(self._once)
            except Exception as e:  # stopped meanwhile
                log.debug("%s watch stopped: %s", self.resource.plural, e)
                return

    def _sleep(self, seconds: float) -> None:
        self.stopped.wait(seconds)  # a stop cuts the wait short

    def _once(self) -> None:
        """One list (if no version is held), then one watch until it ends."""
        if self.version is None:
            self._list()
        try:
            self._watch()
        except Gone as e:
            log.info("%s: %s: listing again", self.resource.plural, e)
            self.version = None

    def _list(self) -> None:
        """A whole new list, delivered page by page, then its keys (what it lacks is deleted)."""
        versions: list[str] = []
        keys: set[str] = set()
        for page in self.resource.pages(self.api, versions.append, self.options):
            events: list[Event] = []
            for obj in page:
                key = object_key(obj)
                keys.add(key)
                events.append((key, obj))
            self._push(events)
        self._push([(None, keys)])
        self.version = versions[0] if versions else None
        if self.version is None:
            raise kube.ApiError(500, "no resourceVersion", f"the {self.resource.plural} list has no resourceVersion")

    def _watch(self) -> None:
        query = {
            "resourceVersion": self.version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_seconds,
            **self.options,
        }
        event = self.resource.wire.event
        try:
            for frame in self.api.watch(self.resource.path, query, timeout=IDLE_SECONDS, protobuf=True):
                if self.stopped.is_set():
                    return
                kind, obj = event(frame)
                if kind == "ERROR":
                    if obj["code"] == 410:
                        raise Gone(obj["message"] or "410 Gone")
                    raise kube.ApiError(int(obj["code"] or 500), str(obj["reason"]), str(obj["message"]))
                version = obj["metadata"].get("resourceVersion")
                if kind != "BOOKMARK":
                    self.counted()
                    self._push([(object_key(obj), None if kind == "DELETED" else obj)])
                if version:
                    self.version = version
        except kube.ApiError as e:
            if e.gone:
                raise Gone(e.message) from None
            raise

    def _push(self, events: list[Event]) -> None:
        """Queue ``events`` for the loop: one wake-up for whatever it has not taken yet, at once
        or, within ``--min-sync-period`` of the last sync's start, when it ends."""
        with self._lock:
            self._batch += events
            if self._scheduled:
                return
            self._scheduled = True
        at = self.not_before()
        if at <= time.monotonic():
            self.loop.call_soon_threadsafe(self._flush)
        else:
            self.loop.call_soon_threadsafe(self._flush_at, at)

    # -- on the loop

    def _flush_at(self, at: float) -> None:
        self.loop.call_later(max(0.0, at - time.monotonic()), self._flush)

    def _flush(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
            self._scheduled = False
        if not self.stopped.is_set():
            self.deliver(batch)
