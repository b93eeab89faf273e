"""Our Service and EndpointSlice watches (operator/reflector.py) against a real kube-apiserver:
protobuf lists and watches parse as the apiserver's JSON of the same objects; the label
selectors keep other proxies' and headless objects away, a label added mid-watch deletes, removed
adds back; after "410 Gone" the new list finds what was deleted meanwhile.

The reflector runs in this process, feeding a change tracker (the operator's, over the fake
dataplane); the operator end to end: test_operator.py."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from nftproxy.model.parse import parse_endpoint_slice, parse_service
from nftproxy.operator import handlers, kube
from nftproxy.operator.reflector import SERVICES, SLICES, Reflector, Resource
from testkit.k8s import objects as k
from testkit.k8s.controlplane import ControlPlane
from tests.support.syncer import make

pytestmark = [pytest.mark.k8s]

OTHER = {"service.kubernetes.io/service-proxy-name": "other"}


def _apply(cp: ControlPlane, *objects: dict[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


_CREATED: list[str] = []  # namespaces of this module's objects: emptied after each test


def _namespace(cp: ControlPlane, name: str) -> str:
    _apply(cp, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    _CREATED.append(name)
    return name


@pytest.fixture(autouse=True)
def _leave_no_object(control_plane: ControlPlane) -> Iterator[None]:
    """The session's control plane is shared: a Service labelled for another proxy left here would
    count in other modules' totals (no namespace controller runs to delete a namespace's objects)."""
    yield
    while _CREATED:
        ns = _CREATED.pop()
        control_plane.kubectl("delete", "services,endpointslices", "--all", "-n", ns, "--wait=false")


def _json_items(api: kube.Client, path: str) -> dict[str, dict[str, Any]]:
    return {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in api.request("GET", path)["items"]}


def _slice(name: str, service: str, *addresses: str, **kw: Any) -> dict[str, Any]:
    eps = [
        k.endpoint(addresses[0], node="n1", zone="z1", for_zones=["z1"], for_nodes=["n1"]),
        *(k.endpoint(a, ready=False, serving=True, terminating=True) for a in addresses[1:]),
    ]
    return k.endpoint_slice(name, service, eps, [k.port(80, "http"), {"name": "x", "protocol": "UDP"}], **kw)


def test_protobuf_lists_parse_as_the_json_of_the_same_objects(control_plane: ControlPlane) -> None:
    ns = _namespace(control_plane, "lean-list")
    _apply(
        control_plane,
        k.service("plain", [], [k.port(80, "http", target="web")], namespace=ns),
        k.service(
            "lb", [], [k.port(443, "https")], namespace=ns, type="LoadBalancer", externalTrafficPolicy="Local",
            loadBalancerSourceRanges=["10.0.0.0/8"], externalIPs=["198.19.0.1"], sessionAffinity="ClientIP",
            sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}}, internalTrafficPolicy="Local",
            allocateLoadBalancerNodePorts=False, trafficDistribution="PreferClose",
            annotations={"nftproxy.io/load-balancing": "source-hash"},
        ),
        k.service("headless", ["None"], [k.port(80)], namespace=ns),
        k.service("ext", [], [], namespace=ns, type="ExternalName", externalName="example.com"),
        _slice("plain-1", "plain", "10.244.0.2", "10.244.0.3", namespace=ns),
        k.endpoint_slice("v6", "plain", [k.endpoint("fd00:10:244::2")], [k.port(80)], namespace=ns,
                         address_type="IPv6"),
    )  # fmt: skip
    api = kube.connect(str(control_plane.kubeconfig))
    for resource, path, parse in (
        (SERVICES, f"/api/v1/namespaces/{ns}/services", parse_service),
        (SLICES, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", parse_endpoint_slice),
    ):
        served = _json_items(api, path)
        lean = {
            key: o
            for page in api.pages(path, decode=resource.wire.list_page)
            for o in page
            if (key := f"{o['metadata']['namespace']}/{o['metadata']['name']}") in served
        }
        assert set(lean) == set(served) and len(served) >= 2
        for key, obj in served.items():
            assert parse(lean[key]) == parse(obj), key
            assert "managedFields" not in lean[key]["metadata"]


class Watched:
    """A reflector of ``resource`` from ``version`` (None: its own list first), into a change
    tracker that holds ``held``."""

    def __init__(self, api: kube.Client, resource: Resource, version: str | None, held: dict[str, Any]) -> None:
        self.api = api
        self.resource = resource
        self.version = version
        self.held = held
        self.syncer, _ = make()
        self.reflector: Reflector | None = None

    def start(self) -> None:
        changes = self.syncer.changes
        changed = changes.service_changed if self.resource is SERVICES else changes.slice_changed
        for key, obj in self.held.items():
            changed(key, obj)
        changes.mark_loaded()
        ctx = handlers.Context(self.syncer.settings, self.syncer, cast(Any, None), api=self.api)
        deliver = handlers.deliver(ctx, self.resource)
        loop = asyncio.get_running_loop()
        options = kube.service_options(None) if self.resource is SERVICES else kube.SLICE_OPTIONS
        self.reflector = Reflector(self.api, self.resource, options, deliver, loop)
        self.reflector.start(self.version)

    async def until(self, done: Callable[[set[str]], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done(self.held_keys()):
            assert time.monotonic() < deadline, f"timed out; held {sorted(self.held_keys())}"
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        if self.reflector is not None:
            self.reflector.stop()

    def held_keys(self) -> set[str]:
        return {key for kind, key in self.syncer.changes.held() if kind == self.resource.kind}

    def parsed(self, key: str) -> Any:
        return self.syncer.changes.pending.get((self.resource.kind, key))


def _version(api: kube.Client, path: str) -> str:
    return str(api.request("GET", path, {"limit": 1})["metadata"]["resourceVersion"])


def test_a_protobuf_watch_delivers_changes_as_their_json_parses(control_plane: ControlPlane) -> None:
    ns = _namespace(control_plane, "lean-watch")
    api = kube.connect(str(control_plane.kubeconfig))
    _apply(control_plane, k.service("web", [], [k.port(80, "http")], namespace=ns))
    start = _version(api, kube.SLICES)
    w = Watched(api, SLICES, start, {})

    def write() -> None:
        _apply(control_plane, _slice("web-1", "web", "10.244.0.2", "10.244.0.3", namespace=ns))
        control_plane.kubectl("delete", "endpointslice", "web-1", "-n", ns)
        _apply(control_plane, _slice("web-2", "web", "10.244.0.4", namespace=ns))

    async def go() -> None:
        w.start()
        try:
            await asyncio.get_running_loop().run_in_executor(None, write)
            await w.until(lambda held: f"{ns}/web-2" in held)
        finally:
            w.stop()

    asyncio.run(go())
    assert {key for key in w.held_keys() if key.startswith(f"{ns}/")} == {f"{ns}/web-2"}, "web-1 added, deleted"
    served = json.loads(control_plane.kubectl("get", "endpointslice", "web-2", "-n", ns, "-o", "json").stdout)
    assert w.parsed(f"{ns}/web-2") == parse_endpoint_slice(served)


def test_another_proxys_services_are_never_sent_and_a_label_change_mid_watch_is_a_deletion_or_an_addition(
    control_plane: ControlPlane,
) -> None:
    ns = _namespace(control_plane, "lean-labels")
    api = kube.connect(str(control_plane.kubeconfig))
    _apply(
        control_plane,
        k.service("mine", [], [k.port(80)], namespace=ns),
        k.service("theirs", [], [k.port(80)], namespace=ns, labels=OTHER),
        k.service("later", [], [k.port(80)], namespace=ns),
        k.service("headless", ["None"], [k.port(80)], namespace=ns),
        _slice("mine-1", "mine", "10.244.0.2", namespace=ns),
        _slice("headless-1", "headless", "10.244.0.3", namespace=ns, labels={"service.kubernetes.io/headless": ""}),
    )
    slices = {o["metadata"]["name"] for page in kube.endpoint_slice_pages(api, None, kube.SLICE_OPTIONS) for o in page}
    assert "mine-1" in slices and "headless-1" not in slices
    pages = kube.service_pages(api, None, kube.service_options(None))
    listed = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for page in pages for o in page}
    assert f"{ns}/mine" in listed and f"{ns}/theirs" not in listed and f"{ns}/headless" not in listed
    w = Watched(api, SERVICES, None, {})  # lists first

    def relabel() -> None:
        control_plane.kubectl("label", "service", "later", "-n", ns, "service.kubernetes.io/service-proxy-name=other")
        control_plane.kubectl("label", "service", "theirs", "-n", ns, "service.kubernetes.io/service-proxy-name-")

    async def go() -> None:
        w.start()
        try:
            await w.until(lambda held: f"{ns}/later" in held)
            assert f"{ns}/theirs" not in w.held_keys()
            await asyncio.get_running_loop().run_in_executor(None, relabel)
            await w.until(lambda held: f"{ns}/theirs" in held and f"{ns}/later" not in held)
        finally:
            w.stop()

    asyncio.run(go())
    assert f"{ns}/mine" in w.held_keys()


def _etcd(cp: ControlPlane, call: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"{cp.etcd_url}/v3/{call}", json.dumps(body).encode())  # noqa: S310
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310  (the test's etcd, http)
        return dict(json.load(resp))


def test_after_410_gone_the_new_list_finds_what_was_deleted_meanwhile(control_plane: ControlPlane) -> None:
    """The watch starts from a version etcd has compacted away, on an apiserver restarted since
    (as after a long outage): the apiserver answers 410; the reflector lists again, and a Service
    we held that the new list lacks (deleted while the watch was away) is deleted."""
    ns = _namespace(control_plane, "lean-gone")
    api = kube.connect(str(control_plane.kubeconfig))
    _apply(control_plane, k.service("stays", [], [k.port(80)], namespace=ns))
    _apply(control_plane, k.service("ghost", [], [k.port(80)], namespace=ns))
    ghost = json.loads(control_plane.kubectl("get", "service", "ghost", "-n", ns, "-o", "json").stdout)
    stays = json.loads(control_plane.kubectl("get", "service", "stays", "-n", ns, "-o", "json").stdout)
    too_old = ghost["metadata"]["resourceVersion"]  # where the watch was when it went away
    control_plane.kubectl("delete", "service", "ghost", "-n", ns)
    for i in range(3):  # later writes, then everything before them compacted away
        _apply(control_plane, k.service(f"later-{i}", [], [k.port(80)], namespace=ns))
    revision = int(_etcd(control_plane, "kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    _etcd(control_plane, "kv/compaction", {"revision": revision, "physical": True})
    control_plane.stop_apiserver()  # its watch cache starts again after the compaction
    control_plane.start_apiserver()
    with pytest.raises(kube.ApiError) as gone:  # what the apiserver says of that version now
        events = api.watch(kube.SERVICES, {"resourceVersion": too_old, "timeoutSeconds": 5}, timeout=10, protobuf=True)
        for frame in events:
            kind, obj = SERVICES.wire.event(frame)
            if kind == "ERROR":
                raise kube.ApiError(int(obj["code"]), str(obj["reason"]), str(obj["message"]))
    assert gone.value.gone, gone.value
    w = Watched(api, SERVICES, too_old, {f"{ns}/ghost": ghost, f"{ns}/stays": stays})

    async def go() -> None:
        w.start()
        try:
            await w.until(lambda held: f"{ns}/ghost" not in held)
        finally:
            w.stop()

    asyncio.run(go())
    assert {f"{ns}/stays", f"{ns}/later-2"} <= w.held_keys()
    assert ("svc", f"{ns}/ghost") in w.syncer.changes.pending and w.parsed(f"{ns}/ghost") is None  # deleted
