"""Services and EndpointSlices read in protobuf parse exactly as their JSON does: the same
Service, EndpointSlice, Ignored or Skipped (with the same reason), for the builder's objects and
for generated ones, hostile values included (what an apiserver can hold of them)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from nftproxy.model.parse import parse_endpoint_slice, parse_service
from nftproxy.operator import wire
from testkit.k8s import objects as k
from tests.fuzz import strategies as S
from tests.support import protobuf as pb
from tests.support.fuzzing import examples

ROOT = Path(__file__).resolve().parents[2]
TRIGGER = {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-02T03:04:05Z"}

SERVICES = [
    k.service("plain", ["10.96.0.1"], [k.port(80, "http", target=8080)]),
    k.service("named-target", ["10.96.0.2"], [k.port(53, "dns", "UDP", target="dns"), k.port(53, "dns-tcp")]),
    k.service(
        "lb",
        ["10.96.0.3", "fd00:10:96::3"],
        [k.port(443, "https", node_port=30443)],
        type="LoadBalancer",
        external_ips=["198.19.0.1", "bogus"],
        lb_ingress=[{"ip": "198.19.0.9"}, {"ip": "198.19.0.10", "ipMode": "Proxy"}, {"hostname": "lb.example"}],
        loadBalancerSourceRanges=["10.0.0.0/8", " 192.168.0.0/16 ", "nope"],
        externalTrafficPolicy="Local",
        healthCheckNodePort=31000,
        allocateLoadBalancerNodePorts=False,
        ipFamilies=["IPv4", "IPv6"],
        ipFamilyPolicy="PreferDualStack",
    ),
    k.service(
        "affinity",
        ["10.96.0.4"],
        [k.port(80)],
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}},
        internalTrafficPolicy="Local",
        trafficDistribution="PreferClose",
        annotations={"nftproxy.io/load-balancing": "round-robin", "other": "x"},
    ),
    k.service("affinity-default", ["10.96.0.5"], [k.port(80)], sessionAffinity="ClientIP", sessionAffinityConfig={}),
    k.service(
        "bad-affinity",
        ["10.96.0.6"],
        [k.port(80)],
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 0}},
    ),
    k.service("bad-balancing", ["10.96.0.7"], [k.port(80)], annotations={"nftproxy.io/load-balancing": "nope"}),
    k.service("headless", ["None"], [k.port(80)]),
    k.service("external-name", [], [], type="ExternalName", externalName="example.com"),
    k.service("other-proxy", ["10.96.0.8"], [k.port(80)], labels={"service.kubernetes.io/service-proxy-name": "other"}),
    k.service("ours", ["10.96.0.9"], [k.port(80)], labels={"service.kubernetes.io/service-proxy-name": "nftproxy"}),
    k.service("no-ports", ["10.96.0.10"], []),
    k.service("dup-ports", ["10.96.0.11"], [k.port(80, "a"), k.port(80, "b")]),
    k.service("bad-port", ["10.96.0.12"], [k.port(0)]),
    k.service("no-ip", [], [k.port(80)]),
    k.service("bad-ip", ["10.96.0"], [k.port(80)]),
    k.service("bad-type", ["10.96.0.13"], [k.port(80)], type="Bogus"),
    k.service("np", ["10.96.0.14"], [k.port(80, node_port=30080)], type="NodePort", externalTrafficPolicy="Cluster"),
    k.service("created", ["10.96.0.15"], [k.port(80)], metadata={"creationTimestamp": "2026-03-04T05:06:07Z"}),
]
SLICES = [
    k.endpoint_slice("s-1", "s", [k.endpoint("10.244.0.2", node="n1", zone="z1")], [k.port(80, "http")]),
    k.endpoint_slice(
        "s-2",
        "s",
        [
            k.endpoint("10.244.0.3", ready=False, serving=True, terminating=True),
            k.endpoint("10.244.0.4", ready=None, serving=None, terminating=None),
            k.endpoint("10.244.0.5", for_zones=["z1", "z2"], for_nodes=["n1"]),
            k.endpoint("10.244.0.6", for_zones=[]),
            k.endpoint("bogus"),
            {"addresses": [], "conditions": {}},
        ],
        [k.port(80, "http"), {"name": "all"}, {"port": 8080}],
    ),
    k.endpoint_slice("v6", "s", [k.endpoint("fd00:10:244::2")], [k.port(80)], address_type="IPv6"),
    k.endpoint_slice("fqdn", "s", [{"addresses": ["a.example"]}], [k.port(80)], address_type="FQDN"),
    k.endpoint_slice("headless", "s", [], [k.port(80)], labels={"service.kubernetes.io/headless": ""}),
    k.endpoint_slice("orphan", None, [], None),
    k.endpoint_slice("dup", "s", [], [k.port(80, "a"), k.port(81, "a")]),
    k.endpoint_slice("bad-port", "s", [], [k.port(70000)]),
    k.endpoint_slice("trigger", "s", [k.endpoint("10.244.0.9")], [k.port(80)], metadata={"annotations": TRIGGER}),
]


def _same(kind: wire.Kind, obj: dict[str, Any], proxy_name: str | None = None) -> None:
    lean = pb.lean(kind, obj)
    assert lean is not None, "the apiserver could hold this object"
    served = pb.apiserver_json(kind, obj)
    if kind is wire.SERVICES:
        assert parse_service(lean, proxy_name) == parse_service(served, proxy_name)
    else:
        assert parse_endpoint_slice(lean) == parse_endpoint_slice(served)


@pytest.mark.parametrize("obj", SERVICES, ids=lambda o: o["metadata"]["name"])
@pytest.mark.parametrize("proxy_name", [None, "nftproxy"])
def test_a_service_in_protobuf_parses_as_its_json(obj: dict[str, Any], proxy_name: str | None) -> None:
    _same(wire.SERVICES, obj, proxy_name)


@pytest.mark.parametrize("obj", SLICES, ids=lambda o: o["metadata"]["name"])
def test_an_endpoint_slice_in_protobuf_parses_as_its_json(obj: dict[str, Any]) -> None:
    _same(wire.SLICES, obj)


def test_the_lean_object_holds_only_what_the_parser_reads() -> None:
    obj = k.service("lb", ["10.96.0.3"], [k.port(80)], annotations={"a": "b" * 10_000}, labels={"app": "web"})
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    obj["metadata"]["resourceVersion"] = "42"
    lean = pb.lean(wire.SERVICES, obj)
    assert lean == {
        "metadata": {"name": "lb", "namespace": "default", "resourceVersion": "42"},
        "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.3", "clusterIPs": ["10.96.0.3"],
                 "ports": [{"port": 80, "protocol": "TCP"}]},
    }  # fmt: skip


@settings(max_examples=examples(300, 5000), suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(S.service())
def test_any_service_the_apiserver_can_hold_parses_the_same_in_protobuf(obj: dict[str, Any]) -> None:
    assume(pb.message(wire.SERVICES, obj) is not None)
    _same(wire.SERVICES, obj)
    _same(wire.SERVICES, obj, "nftproxy")


@settings(max_examples=examples(300, 5000), suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(S.endpoint_slice())
def test_any_endpoint_slice_the_apiserver_can_hold_parses_the_same_in_protobuf(obj: dict[str, Any]) -> None:
    assume(pb.message(wire.SLICES, obj) is not None)
    _same(wire.SLICES, obj)


def test_watch_frames_are_read_across_short_reads_and_decoded() -> None:
    svc = pb.message(wire.SERVICES, k.service("a", ["10.96.0.1"], [k.port(80)]))
    data = pb.watch_frame("ADDED", svc) + pb.watch_frame("DELETED", svc) + pb.gone_frame("too old")

    class Trickle(io.RawIOBase):  # a socket that hands out 3 bytes at a time
        def __init__(self) -> None:
            self.data = data

        def read(self, n: int = -1) -> bytes:
            out, self.data = self.data[: min(n, 3)], self.data[min(n, 3) :]
            return out

    events = [wire.SERVICES.event(f) for f in wire.frames(Trickle())]  # type: ignore[arg-type]
    assert [t for t, _ in events] == ["ADDED", "DELETED", "ERROR"]
    assert events[0][1]["spec"]["clusterIP"] == "10.96.0.1"
    assert events[2][1]["code"] == 410 and events[2][1]["message"] == "too old"


def test_a_cut_frame_is_an_error() -> None:
    svc = pb.message(wire.SERVICES, k.service("a", ["10.96.0.1"], [k.port(80)]))
    with pytest.raises(wire.WireError):
        list(wire.frames(io.BytesIO(pb.watch_frame("ADDED", svc)[:-2])))


def test_json_is_no_protobuf_object() -> None:
    with pytest.raises(wire.WireError):
        wire.SERVICES.list_page(b'{"kind": "ServiceList"}')


def test_the_generated_classes_are_what_the_script_makes() -> None:
    """hack/gen-proto.sh --check: the pinned generated.proto files through the pinned protoc."""
    script = ROOT / "hack" / "gen-proto.sh"
    done = subprocess.run([str(script), "--check"], cwd=ROOT, capture_output=True, text=True, check=False)
    if "missing" in done.stderr and "go mod download" in done.stderr:
        pytest.skip("the Go module cache has no k8s.io/api: " + done.stderr.strip())
    assert done.returncode == 0, done.stderr
