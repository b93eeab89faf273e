"""The change tracker: objects in (our watches' events and lists, kopf's), parsed, deduplicated by
resourceVersion, held as pending changes until a sync takes them, then applied to the
dataplane's inputs in one go. kube-proxy's ServiceChangeTracker and EndpointsChangeTracker
(pkg/proxy/servicechangetracker.go, endpointschangetracker.go) in one: a watch event reaches it
in one call, and the sync takes what is pending.

Bad input is kept as a reason (the last good version keeps working); this node's Node, the
cluster's ServiceCIDRs and the apiserver's version are merged into the config
(``ProxyConfig.for_node``).

Thread-safe as kube-proxy's trackers: changes are queued on the event loop thread (our watches'
batches, kopf's handlers, our lists; ``wake`` is an asyncio.Event the sync loop waits on), and taken by a sync on
that thread (``apply``) or, during a first load, by the worker thread that runs it (``top_up``).
One lock guards the pending changes, which both touch; the rest is the event loop's alone, or,
for the parse failures of the objects a sync takes, its alone (``_apply``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nftproxy.compiler import ProxyConfig, features
from nftproxy.compiler.config import NODE_CIDR
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.parse import (
    Ignored,
    parse_endpoint_slice,
    parse_node,
    parse_service,
    parse_service_cidr,
    warnings_report,
)
from nftproxy.model.types import EndpointSlice, Node, Service, ServiceCIDR, Skipped
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.proxy_health import ProxyHealth
from nftproxy.operator.settings import Settings

log = logging.getLogger("nftproxy.syncer")

Change = Service | EndpointSlice | Node | ServiceCIDR | Skipped | Ignored | tuple[int, int] | None
Trigger = tuple[str, float]  # (ip_family, an EndpointSlice's last-change-trigger-time)
Key = tuple[str, str]  # (kind, namespace/name or name): "svc", "slice", "node", "cidr", "version"


def object_key(obj: Mapping[str, Any]) -> str:
    """namespace/name of a Service or EndpointSlice: the key of its changes."""
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _meta_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "?") if isinstance(meta, Mapping) else "?"


def _trigger_epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class ChangeTracker:
    def __init__(self, settings: Settings, metrics: Metrics, health: ProxyHealth) -> None:
        self.settings = settings
        self.metrics = metrics
        self.health = health  # kube-proxy's QueuedUpdate: a change after the initial lists starts its clock
        self.loaded = asyncio.Event()  # the initial lists are in: syncing may start
        self.wake = asyncio.Event()  # a change was queued after the initial lists: the sync loop looks
        self._lock = threading.Lock()  # around ``pending*``: queued on the loop, taken by the loop or a worker
        self.pending: dict[Key, Change] = {}
        self.pending_counts: dict[str, int] = {}  # pending changes per kind (for the gauges)
        self.pending_since: float | None = None  # monotonic time the oldest pending change was queued
        # a Node's or ServiceCIDR's parse failures or items left out (written as they arrive) …
        self.bad: dict[tuple[str, str], Skipped] = {}
        # … and a Service's or EndpointSlice's parse failures (written as a sync takes them)
        self.bad_objects: dict[tuple[str, str], Skipped] = {}
        self.versions: dict[Key, str] = {}  # resourceVersion last queued, per object
        self.node: Node | None = None
        self.service_cidrs: dict[str, ServiceCIDR] = {}  # by name: the cluster's ServiceCIDRs
        self.version: tuple[int, int] | None = None  # the apiserver's (major, minor): the gates' defaults

    # -- in: one call per object (our watches and lists, kopf's handlers) ----------------------
    def service_changed(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if self._seen(("svc", key), obj):
            return
        value = None if obj is None else parse_service(obj, self.settings.proxy.service_proxy_name)
        self.metrics.service_changes.inc()
        self._queue(("svc", key), value)

    def slice_changed(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if self._seen(("slice", key), obj):
            return
        log.debug("slice event %s", key)
        value = None if obj is None else parse_endpoint_slice(obj)
        self.metrics.endpoint_changes.inc()
        self._queue(("slice", key), value)

    def node_changed(self, obj: Mapping[str, Any]) -> None:
        node = parse_node(obj)
        self._report("Node", _meta_name(obj), node)
        if isinstance(node, Node):
            self._report("NodeCIDR", node.name, self._pod_cidrs_missing(node))
        if isinstance(node, Node) and node != self.node:
            self._queue(("node", node.name), node)

    def _pod_cidrs_missing(self, node: Node) -> Skipped | None:
        """--detect-local-mode NodeCIDR and a Node without spec.podCIDRs (not allocated yet):
        reported until it has one. kube-proxy waits 5 minutes for it at start, then exits (and
        restarts on any later change); nftproxy serves Services meanwhile with no local-traffic
        detection (kube-proxy's no-op detector: ClusterIP traffic from outside the cluster is not
        masqueraded, pods do not skip Local policies), and takes the podCIDRs as they come."""
        if self.settings.proxy.detect_local_mode != NODE_CIDR or node.pod_cidrs:
            return None
        return Skipped(
            "Node", "", node.name,
            "no spec.podCIDRs: --detect-local-mode NodeCIDR cannot tell pod traffic apart until the Node has them "
            "(ClusterIP traffic from outside the cluster is not masqueraded, pods do not skip Local policies)",
        )  # fmt: skip

    def node_deleted(self) -> None:
        """Our Node is gone: /healthz answers 503 from now on (its rules stay: traffic goes on)."""
        if self.node is not None:
            self.node = dataclasses.replace(self.node, eligible=False)

    def service_cidr_changed(self, name: str, obj: Mapping[str, Any] | None) -> None:
        """A ServiceCIDR added, changed or deleted: applied at the next sync (kube-proxy waits
        for its hourly full sync)."""
        value = None if obj is None else parse_service_cidr(obj)
        self._report("ServiceCIDR", name, value)
        if isinstance(value, Skipped):
            return
        if value != self.service_cidrs.get(name):
            self._queue(("cidr", name), value)

    def server_version(self, info: Mapping[str, Any]) -> None:
        """The apiserver's ``/version``: the feature gates follow its defaults (read once, before
        the first sync; --feature-gates overrides them)."""
        try:
            text = features.server_version(info)
            version = features.parse_version(text)
        except ValueError as e:  # never expected of an apiserver: the flags' gates alone, and say so
            log.warning("the apiserver's version is unreadable (%s): feature gates from --feature-gates alone", e)
            return
        if version != self.version:
            log.info("Kubernetes %s: %s", text, features.describe(version, self.settings.feature_gates))
            self._queue(("version", text), version)

    def initial_lists(
        self,
        node: Mapping[str, Any] | None,
        version: Mapping[str, Any],
        cidrs: list[dict[str, Any]] | Exception,
    ) -> None:
        """The rest of the initial lists, after their Services and EndpointSlices: the apiserver's
        version, the ServiceCIDRs (best effort: if their list failed, only their drop rule waits,
        for the watch) and this node's Node (None: not found); then syncing may start. The one
        place for both starts (boot.py's, and kopf's startup handler's)."""
        self.server_version(version)
        if isinstance(cidrs, Exception):
            log.warning("listing the ServiceCIDRs failed (%s): their drop rule waits for the watch", cidrs)
            cidrs = []
        for obj in cidrs:
            self.service_cidr_changed(obj["metadata"]["name"], obj)
        if node is None:
            log.warning("Node %s not found: NodePorts wait for it", self.settings.node_name)
        else:
            self.node_changed(node)
        self.mark_loaded()

    def mark_loaded(self) -> None:
        """The initial lists are in: syncing may start (never from a half-empty cache)."""
        self.loaded.set()
        self._publish()
        self.wake.set()

    def held(self) -> set[Key]:
        """(kind, key) of every Service and EndpointSlice held (as last listed or watched)."""
        return set(self.versions)

    def _seen(self, key: Key, obj: Mapping[str, Any] | None) -> bool:
        """Is ``obj`` the version already queued? (kopf replays every object when its watches
        start, right after our own initial list: 20k no-op parses and syncs at 10k Services.)"""
        if obj is None:
            self.versions.pop(key, None)
            return False
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version and self.versions.get(key) == version:
            return True
        if version:
            self.versions[key] = version
        return False

    def _report(self, kind: str, name: str, value: Node | ServiceCIDR | Skipped | None) -> None:
        """A Node's or ServiceCIDR's problems into ``bad`` (ProxyStatus, Events), and the log."""
        report = value if isinstance(value, Skipped) or value is None else warnings_report(value)
        if report is None:
            self.bad.pop((kind, name), None)
        elif self.bad.get((kind, name)) != report:
            log.warning("%s", report)
            self.bad[(kind, name)] = report

    def _queue(self, key: Key, value: Change) -> None:
        with self._lock:
            if not self.pending:
                self.pending_since = time.monotonic()
            if key not in self.pending:
                self.pending_counts[key[0]] = self.pending_counts.get(key[0], 0) + 1
            self.pending[key] = value
        if self.loaded.is_set():  # during the initial lists (10^4 objects) once, at the end
            # kube-proxy's QueuedUpdate: a change after the initial lists starts the health clock
            self.health.queued_update(time.monotonic())
            self._publish()
            self.wake.set()

    def _publish(self) -> None:
        self.metrics.service_changes_pending.set(self.pending_counts.get("svc", 0))
        self.metrics.endpoint_changes_pending.set(self.pending_counts.get("slice", 0))
        self.metrics.queued(time.time())

    # -- out: what the sync reads and takes ----------------------------------------------------
    def queued_before(self, t: float) -> bool:
        """Does a change queued before ``t`` (monotonic) still wait for a sync?"""
        with self._lock:
            return bool(self.pending) and (self.pending_since is None or self.pending_since < t)

    def skipped(self) -> list[Skipped]:
        """The objects left out as bad input, with their reasons (read on the event loop thread,
        between syncs)."""
        return [*self.bad.values(), *self.bad_objects.values()]

    def config(self) -> ProxyConfig:
        """The flags with this node's Node, the cluster's ServiceCIDRs and the feature gates of
        its version merged in: the one place the operator builds the dataplane's config."""
        cidrs = (n for c in self.service_cidrs.values() for n in c.cidrs)
        gates = (  # until the version is read (tests that never give one): the flags' own
            self.settings.proxy.enabled_gates
            if self.version is None
            else features.enabled(self.version, self.settings.feature_gates)
        )
        return self.settings.proxy.for_node(self.node).with_service_cidrs(cidrs).with_gates(gates)

    def apply(self, dp: Dataplane) -> list[Trigger]:
        """Every pending change into the dataplane (its inputs, and its config when the Node, a
        ServiceCIDR or the version changed); the trigger times of the EndpointSlices among them."""
        return self._apply(dp, self._take(None))

    def top_up(self, dp: Dataplane) -> list[Trigger]:
        """In the worker thread of a first load, before its last step: the Service and
        EndpointSlice changes queued since the sync began, into its inputs, to be loaded with it
        (our watches start as the first sync begins: a change made during a ~0.7 s load at 10k
        Services otherwise waited for the load to end, then for a sync of its own). A change of
        the Node, a ServiceCIDR or the version waits for the next sync (it rebuilds everything)."""
        return self._apply(dp, self._take(("svc", "slice")))

    def _take(self, kinds: tuple[str, ...] | None) -> dict[Key, Change]:
        """The pending changes of these kinds (None: all), no longer pending."""
        with self._lock:
            if kinds is None:
                taken, self.pending, self.pending_since = self.pending, {}, None
            else:
                taken = {k: v for k, v in self.pending.items() if k[0] in kinds}
                self.pending = {k: v for k, v in self.pending.items() if k[0] not in kinds}
                if not self.pending:
                    self.pending_since = None
            self.pending_counts = {}
            for kind, _ in self.pending:
                self.pending_counts[kind] = self.pending_counts.get(kind, 0) + 1
        self.metrics.service_changes_pending.set(0)
        self.metrics.endpoint_changes_pending.set(0)
        return taken

    def _apply(self, dp: Dataplane, pending: dict[Key, Change]) -> list[Trigger]:
        """``pending`` (taken) into the dataplane. Never runs twice at once: ``apply`` runs before
        a sync's worker job starts, ``top_up`` inside it."""
        inputs = dp.inputs
        bad = self.bad_objects
        triggers: list[Trigger] = []
        config_changed = False
        for (kind, key), value in pending.items():
            if kind == "node":
                assert isinstance(value, Node)
                self.node = value
                config_changed = True
                continue
            if kind == "version":
                assert isinstance(value, tuple)
                self.version = value
                config_changed = True
                continue
            if kind == "cidr":
                if isinstance(value, ServiceCIDR):
                    self.service_cidrs[key] = value
                else:
                    self.service_cidrs.pop(key, None)
                config_changed = True
                continue
            what = "Service" if kind == "svc" else "EndpointSlice"
            if isinstance(value, Skipped):
                # Bad input: reported, and the last good version (if any) keeps working.
                bad[(what, key)] = value
                continue
            bad.pop((what, key), None)
            if kind == "svc":
                if value is None:
                    inputs.delete_service(key)
                elif isinstance(value, Ignored):
                    inputs.ignore_service(key)
                elif isinstance(value, Service):
                    inputs.set_service(value)
            elif isinstance(value, EndpointSlice):
                inputs.set_slice(value)
                t = _trigger_epoch(value.trigger_time)
                if t is not None:
                    triggers.append(("IPv6" if value.address_type == "IPv6" else "IPv4", t))
            else:  # deleted, or an FQDN slice
                inputs.delete_slice(key)
        if config_changed:
            dp.set_config(self.config())
        return triggers
