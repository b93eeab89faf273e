"""The syncer's intake: objects in (kopf's events, our lists), parsed, deduplicated by
resourceVersion, queued until the next sync, then applied to the dataplane in one go. Bad input is
kept as a reason (the last good version keeps working); this node's Node is merged into the
config (``ProxyConfig.for_node``). Runs on the event loop thread.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from nftproxy.compiler import ProxyConfig, features
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
from nftproxy.operator.settings import Settings

log = logging.getLogger("nftproxy.syncer")

Change = Service | EndpointSlice | Node | ServiceCIDR | Skipped | Ignored | tuple[int, int] | None
Trigger = tuple[str, float]  # (ip_family, an EndpointSlice's last-change-trigger-time)


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


class Intake:
    def __init__(self, settings: Settings, metrics: Metrics, queued: Callable[[], None]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.queued = queued  # called after each change queued (the syncer wakes up)
        self.pending: dict[tuple[str, str], Change] = {}
        self.pending_counts: dict[str, int] = {}  # pending changes per kind (for the gauges)
        self.pending_since: float | None = None  # monotonic time the oldest pending change was queued
        # parse failures, per object; for a Node or ServiceCIDR also the items of it left out
        self.bad: dict[tuple[str, str], Skipped] = {}
        self.versions: dict[tuple[str, str], str] = {}  # resourceVersion last queued, per object
        self.node: Node | None = None
        self.service_cidrs: dict[str, ServiceCIDR] = {}  # by name: the cluster's ServiceCIDRs
        self.version: tuple[int, int] | None = None  # the apiserver's (major, minor): the gates' defaults

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

    def held(self) -> set[tuple[str, str]]:
        """(kind, key) of every Service and EndpointSlice held (as last listed or watched)."""
        return set(self.versions)

    def _seen(self, key: tuple[str, str], obj: Mapping[str, Any] | None) -> bool:
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

    def node_changed(self, obj: Mapping[str, Any]) -> None:
        node = parse_node(obj)
        self._report("Node", _meta_name(obj), node)
        if isinstance(node, Node) and node != self.node:
            self._queue(("node", node.name), node)

    def _report(self, kind: str, name: str, value: Node | ServiceCIDR | Skipped | None) -> None:
        """A Node's or ServiceCIDR's problems into ``bad`` (ProxyStatus, Events), and the log."""
        report = value if isinstance(value, Skipped) or value is None else warnings_report(value)
        if report is None:
            self.bad.pop((kind, name), None)
        elif self.bad.get((kind, name)) != report:
            log.warning("%s", report)
            self.bad[(kind, name)] = report

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

    def _queue(self, key: tuple[str, str], value: Change) -> None:
        if not self.pending:
            self.pending_since = time.monotonic()
        if key not in self.pending:
            self.pending_counts[key[0]] = self.pending_counts.get(key[0], 0) + 1
        self.pending[key] = value
        self.queued()

    def publish_metrics(self) -> None:
        self.metrics.service_changes_pending.set(self.pending_counts.get("svc", 0))
        self.metrics.endpoint_changes_pending.set(self.pending_counts.get("slice", 0))
        self.metrics.queued(time.time())

    def apply(self, dp: Dataplane, nodes: bool = True) -> list[Trigger]:
        """The queued changes into the dataplane; ``nodes`` False: the Node's stay queued."""
        pending, self.pending = self.pending, {}
        self.pending_counts.clear()
        since, self.pending_since = self.pending_since, None
        if not nodes:
            self.pending = {k: v for k, v in pending.items() if k[0] == "node"}
            pending = {k: v for k, v in pending.items() if k[0] != "node"}
            if self.pending:
                self.pending_counts["node"] = len(self.pending)
                self.pending_since = since
        self.metrics.service_changes_pending.set(0)
        self.metrics.endpoint_changes_pending.set(0)
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
                self.bad[(what, key)] = value
                continue
            self.bad.pop((what, key), None)
            if kind == "svc":
                if value is None:
                    dp.delete_service(key)
                elif isinstance(value, Ignored):
                    dp.ignore_service(key)
                elif isinstance(value, Service):
                    dp.set_service(value)
            elif isinstance(value, EndpointSlice):
                dp.set_slice(value)
                t = _trigger_epoch(value.trigger_time)
                if t is not None:
                    triggers.append(("IPv6" if value.address_type == "IPv6" else "IPv4", t))
            else:  # deleted, or an FQDN slice
                dp.delete_slice(key)
        if config_changed:
            dp.set_config(self.config())
        return triggers
