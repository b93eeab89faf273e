"""`nftproxy run`'s start: the first ruleset before kopf.

The lists of Services and EndpointSlices, this node's Node and the ServiceCIDRs are fetched from
process start with plain GETs (``early``, ``kube``: the standard library, no Kubernetes client), parsed into
the Syncer as they arrive, and the first sync is committed. Only then does ``main`` import kopf,
aiohttp and the Kubernetes client (~0.5 s at every start, more than a 1k-Service first sync) and
start the watches, each at its list's resourceVersion (``handlers.start_watches``): a change
made after the list is delivered by the watch; one the list already had arrives with the same
resourceVersion and is skipped (``changes``). Nothing is missed, nothing applied twice.

This module imports neither kopf, aiohttp nor the Kubernetes client (import-linter checks it).
When a list fails, nothing is marked loaded and the operator's own initial load (kopf's startup
handler, with retries) lists everything as before.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from nftproxy import heap
from nftproxy.operator.changes import object_key
from nftproxy.operator.early import Lists
from nftproxy.operator.syncer import Syncer

log = logging.getLogger("nftproxy.boot")


@dataclass
class Loaded:
    versions: dict[str, str]  # plural -> the list's resourceVersion (where our watch starts)
    node_uid: str | None
    synced: bool  # the first sync succeeded (else it is retried by the Syncer's loop)


def load(syncer: Syncer, lists: Lists) -> Loaded:
    """The lists into the change tracker, as ``handlers.initial_load`` feeds its own; marks it
    loaded. Raises if a list or the Node's GET fails (the ServiceCIDRs are best effort, as there)."""
    started = time.monotonic()
    changes = syncer.changes
    n = {"svc": 0, "slice": 0}
    with heap.bulk_decode():
        for kind, pre, changed in (
            ("svc", lists.services, changes.service_changed),
            ("slice", lists.slices, changes.slice_changed),
        ):
            for page in pre.pages():
                for obj in page:
                    changed(object_key(obj), obj)
                n[kind] += len(page)
        node = lists.node.result()
    version = lists.version.result()
    cidrs: list[dict[str, Any]] | Exception
    try:
        cidrs = lists.cidrs.result()
    except Exception as e:
        cidrs = e
    versions = {
        plural: pre.version
        for plural, pre in (("services", lists.services), ("endpointslices", lists.slices))
        if pre.version is not None
    }
    log.info("initial lists: %d Services, %d EndpointSlices (%.1fs)", n["svc"], n["slice"], time.monotonic() - started)
    changes.initial_lists(node, version, cidrs)
    return Loaded(versions, node["metadata"].get("uid") if node else None, synced=False)


async def first_sync(syncer: Syncer, lists: Lists) -> Loaded | None:
    """The lists in, then one sync. None: a list failed (the operator's initial load lists again)."""
    try:
        loaded = load(syncer, lists)
    except Exception as e:
        log.warning("the first lists failed (%s): listing again", e)
        return None
    try:
        await syncer.sync_once()
        loaded.synced = True
    except Exception as e:  # recorded by the syncer (status, metrics, its log line): its loop retries
        log.debug("first sync failed: %s", e)
    return loaded
