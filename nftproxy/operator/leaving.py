"""Leaving a node for good removes nftproxy's tables there; any other stop keeps them.

When ``nftproxy run`` stops (SIGTERM), it asks whether its DaemonSet (``--daemonset``, env
NFTPROXY_DAEMONSET, in ``--daemonset-namespace``, env POD_NAMESPACE; the chart sets both) still
runs a pod on this node:

* the DaemonSet is gone or being deleted (``helm uninstall``), or
* its pod template no longer selects this Node (its nodeSelector, or its required node affinity,
  against the Node's labels: e.g. the node's ``nftproxy.io/proxy`` label removed),

then nftproxy is leaving this node for good: it waits (at most ``WAIT`` seconds) for another
proxy's rules on the node (kube-proxy's, ``migration.detect``), so that Services are answered
throughout, then deletes its own tables, unless another nftproxy has started on the node
meanwhile (a reinstall: it claims the tables, ``sockets.Claim``). Anything else (a rolling update, a restart, an
eviction, a drain, an apiserver that does not answer, a Node that cannot be read) keeps them:
the next nftproxy on this node adopts them.

``helm uninstall`` deletes the release's Role and ServiceAccount right after the DaemonSet, before
the pods get SIGTERM: a request made then is refused. So the DaemonSet is watched while the proxy
runs (``DaemonSetWatch``), and its deletion seen by the watch is enough at the stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nftproxy.operator import kube
from nftproxy.operator.sockets import Claim

log = logging.getLogger("nftproxy.leaving")

WAIT = 15.0  # seconds to wait for another proxy's rules (the chart's grace period is 30 s)
ASK_TIMEOUT = 3.0  # seconds per request at the stop
WATCH_SECONDS = 300  # the watch's timeoutSeconds (then listed and watched again)
RETRY = 5.0  # seconds between two tries of a failed list or watch


# -- does a pod template still schedule onto this Node? ------------------------------------------


class Undecidable(ValueError):
    """The template holds something this check cannot evaluate: the rules stay."""


def _requirement(expr: Mapping[str, Any], value: str | None) -> bool:
    """One NodeSelectorRequirement against the label's value (None: the Node has no such label)."""
    op = expr.get("operator")
    values: Sequence[str] = expr.get("values") or ()
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None:
            return False
        try:
            have, bound = int(value), int(values[0])
        except (ValueError, IndexError):
            return False  # as the scheduler: a label that is not an integer does not match
        return have > bound if op == "Gt" else have < bound
    raise Undecidable(f"node selector operator {op!r}")


def _term(term: Mapping[str, Any], labels: Mapping[str, str], node: str) -> bool:
    """A NodeSelectorTerm: all of its requirements (an empty term matches no node)."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for expr in exprs:
        if not _requirement(expr, labels.get(str(expr.get("key")))):
            return False
    for expr in fields:
        if expr.get("key") != "metadata.name":
            raise Undecidable(f"node selector field {expr.get('key')!r}")
        if not _requirement(expr, node):
            return False
    return True


def fits(pod_spec: Mapping[str, Any], labels: Mapping[str, str], node: str) -> bool:
    """Does a pod of this spec go onto the Node (``labels``, name ``node``), as the DaemonSet
    controller and the scheduler decide it from the spec's nodeSelector and
    requiredDuringSchedulingIgnoredDuringExecution node affinity (terms ORed, requirements
    ANDed)? Taints are not considered. ``Undecidable`` when the spec holds something unknown."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_term(t, labels, node) for t in required.get("nodeSelectorTerms") or [])


# -- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    leaving: bool  # for good: remove the tables
    why: str


def decide(daemonset: Mapping[str, Any] | None, node: Mapping[str, Any] | None, node_name: str, what: str) -> Verdict:
    """``daemonset``: the object (None: gone); ``node``: this Node (None: could not be read);
    ``what``: how the DaemonSet is named in the reason (namespace/name)."""
    if daemonset is None:
        return Verdict(True, f"the DaemonSet {what} is gone")
    if (daemonset.get("metadata") or {}).get("deletionTimestamp"):
        return Verdict(True, f"the DaemonSet {what} is being deleted")
    if node is None:
        return Verdict(False, f"the Node {node_name} could not be read")
    labels = (node.get("metadata") or {}).get("labels") or {}
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    try:
        if fits(spec, labels, node_name):
            return Verdict(False, f"the DaemonSet {what} still runs a pod on this node (a restart or an update)")
    except Undecidable as e:
        return Verdict(False, f"the DaemonSet {what}'s placement cannot be evaluated ({e})")
    return Verdict(True, f"the DaemonSet {what} no longer selects this node (its nodeSelector or node affinity)")


# -- the DaemonSet, watched while the proxy runs -----------------------------------------------


class DaemonSetWatch:
    """Our DaemonSet as the apiserver last showed it: list, then watch, again and again (a thread;
    errors are retried every RETRY seconds). ``deleted``: the watch saw it deleted or being
    deleted (and not created again since); ``current``: the last object seen (None: none yet,
    and then no stop removes anything: a DaemonSet never seen may be a wrong name)."""

    def __init__(self, api: kube.Client, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.current: dict[str, Any] | None = None
        self.deleted = False
        self.missing = False  # not found at the first list (logged once)
        self.stopped = threading.Event()

    @property
    def what(self) -> str:
        return f"{self.namespace}/{self.name}"

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="daemonset-watch").start()

    def stop(self) -> None:
        self.stopped.set()

    def _seen(self, obj: dict[str, Any] | None) -> None:
        if obj is None and self.current is None:  # never seen: a wrong name tells nothing
            if not self.missing:
                log.warning("the DaemonSet %s is not found (check --daemonset): a stop keeps the rules", self.what)
            self.missing = True
            return
        deleting = obj is None or bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        if deleting != self.deleted:
            state = "being deleted" if obj is not None else "gone"
            log.info("the DaemonSet %s is %s", self.what, state if deleting else "here again")
        self.deleted = deleting  # one of the same name created again (a reinstall) is here again
        if obj is not None:
            self.current = obj

    def _run(self) -> None:
        path = kube.daemonsets_path(self.namespace)
        selector = {"fieldSelector": f"metadata.name={self.name}"}
        while not self.stopped.is_set():
            try:
                listed = self.api.request("GET", path, selector)
                items = listed.get("items") or []
                self._seen(items[0] if items else None)
                version = (listed.get("metadata") or {}).get("resourceVersion", "")
                query = {**selector, "resourceVersion": version, "timeoutSeconds": WATCH_SECONDS}
                for event in self.api.watch(path, query, timeout=WATCH_SECONDS + 30):
                    if self.stopped.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object")
                    if kind in ("ADDED", "MODIFIED") and isinstance(obj, dict):
                        self._seen(obj)
                    elif kind == "DELETED":
                        self._seen(None)
                    elif kind == "ERROR":  # e.g. 410 Gone: list again
                        break
            except Exception as e:
                log.debug("watching the DaemonSet %s: %s", self.what, str(e).splitlines()[0] if str(e) else e)
                self.stopped.wait(RETRY)


def ask(api: kube.Client, watch: DaemonSetWatch, node_name: str) -> Verdict:
    """At the stop: the DaemonSet (deleted as the watch saw it, else asked again) and the Node."""
    if watch.deleted:
        return Verdict(True, f"the DaemonSet {watch.what} was deleted")
    if watch.current is None:
        return Verdict(False, f"the DaemonSet {watch.what} was never found")
    try:
        ds = _read(api, watch)
    except Exception as e:
        return Verdict(False, f"the DaemonSet {watch.what} could not be read: {_first_line(e)}")
    if ds is None or (ds.get("metadata") or {}).get("deletionTimestamp"):
        return decide(ds, None, node_name, watch.what)
    try:
        node = api.request("GET", kube.node_path(node_name), timeout=ASK_TIMEOUT)
    except Exception as e:
        return Verdict(False, f"the Node {node_name} could not be read: {_first_line(e)}")
    return decide(ds, node, node_name, watch.what)


def _read(api: kube.Client, watch: DaemonSetWatch) -> dict[str, Any] | None:
    try:
        return dict(api.request("GET", kube.daemonsets_path(watch.namespace, watch.name), timeout=ASK_TIMEOUT))
    except kube.ApiError as e:
        if e.not_found:
            return None
        raise


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


# -- leaving: wait for another proxy, then remove the tables -------------------------------------


def leave(
    other_proxy: Callable[[], object | None],
    remove: Callable[[], list[str]],
    claim: Claim,
    wait: float = WAIT,
    poll: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait up to ``wait`` seconds until ``other_proxy()`` finds another proxy's rules, then
    ``remove()`` our tables (what it returns: what was removed), logging each step. Unless
    another nftproxy claims the tables meanwhile (``claim``: released by the caller at the stop):
    then they are its own and stay. True: removed."""
    deadline = clock() + wait
    found = other_proxy()
    while found is None and clock() < deadline and not claim.taken_elsewhere():
        sleep(poll)
        found = other_proxy()
    if not claim.take():
        log.info("another nftproxy runs on this node now: the tables are its own and stay")
        return False
    places = getattr(found, "places", None)
    if found is not None:
        log.info("another proxy's rules are on this node (%s): removing nftproxy's tables", ", ".join(places or ()))
    else:
        log.warning(
            "no other proxy's rules on this node after %gs: removing nftproxy's tables anyway (stale rules must not "
            "intercept traffic); Services are not proxied on this node until a proxy runs here",
            wait,
        )
    removed = remove()
    log.info("removed %s", ", ".join(removed) or "nothing (no nftproxy table was left)")
    return True
