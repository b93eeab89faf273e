"""Malformed objects are skipped with a reason naming them; every other Service still compiles.
(A bad item kube-proxy leaves out alone, an externalIP or an endpoint, leaves out only that item:
test_address_spellings.py.)"""

from __future__ import annotations

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.model.manifests import classify
from testkit.k8s import objects as k
from tests.support.builders import GOOD


def _svc(**spec: object) -> k.Obj:
    base = k.service("bad", ["10.96.0.9"], [k.port(80)])
    base["spec"].update(spec)
    return base


def _slice(**fields: object) -> k.Obj:
    base = k.endpoint_slice("bad-1", "good", [k.endpoint("10.244.1.9")], [k.port(8080)])
    base.update(fields)
    return base


BAD = [
    (_svc(ports=[{"port": 0}]), "Service default/bad: spec.ports[0]: port 0 is not in 1-65535"),
    (_svc(ports=[{"port": 70000}]), "port 70000 is not in 1-65535"),
    (_svc(ports=[{"port": 80, "protocol": "ICMP"}]), "unknown protocol 'ICMP'"),
    (_svc(ports=[{"port": 80}, {"port": 80, "name": "x"}]), "duplicate port 80/TCP"),
    (_svc(clusterIP="10.96.0.999", clusterIPs=["10.96.0.999"]), "invalid IP address '10.96.0.999'"),
    (_svc(ports=[]), "spec.ports is empty"),
    (_svc(ports="80"), "spec.ports is not a list"),
    (_svc(clusterIP=None, clusterIPs=None), "no spec.clusterIP allocated"),
    (_svc(type="Weird"), "unknown spec.type 'Weird'"),
    (_svc(ports=[{"port": 80, "nodePort": 99999}], type="NodePort"), "nodePort: port 99999"),
    ({"kind": "Service", "metadata": {"namespace": "x"}, "spec": {}}, "Service x/?: metadata.name is missing"),
    (_slice(ports=[{"port": 0}]), "ports[0]: port 0 is not in 1-65535"),
    (_slice(addressType="IPv5"), "unknown addressType 'IPv5'"),
    (_slice(metadata={"name": "bad-1", "namespace": "default"}), "no kubernetes.io/service-name label"),
    (
        k.endpoint_slice("orphan", "missing", [k.endpoint("10.244.1.3")], [k.port(80)]),
        "EndpointSlice default/orphan: no Service default/missing",
    ),
    ("just a string", "not a Kubernetes object"),
    (
        {"kind": "ConfigMap", "metadata": {"name": "cm"}},
        "ConfigMap cm: not a Service, EndpointSlice, Node or ServiceCIDR",
    ),
]


@pytest.mark.parametrize(("bad", "reason"), BAD, ids=[r for _, r in BAD])
def test_bad_object_is_skipped_with_reason_and_others_still_compile(bad: object, reason: str) -> None:
    inputs = classify([*GOOD, bad])
    desired = compile_tables(inputs.services, inputs.slices, ProxyConfig(), inputs.ignored)
    skipped = [str(s) for s in (*inputs.skipped, *desired.skipped)]
    assert len(skipped) == 1 and reason in skipped[0], skipped
    ip = desired.tables[0]
    assert ("10.96.0.1", "tcp", "80") in ip.elements["service-ips"], "the good Service must still be programmed"
    assert ("10.96.0.9", "tcp", "80") not in ip.elements["service-ips"]


def test_two_services_claiming_one_nodeport_lose_only_that_frontend() -> None:
    """Without creation times, the first by name keeps the contested NodePort; the other keeps
    its ClusterIP."""
    objs = [
        *GOOD,
        k.service("zz-dup", ["10.96.0.50"], [k.port(80, node_port=30001)], type="NodePort"),
        k.service("aa-dup", ["10.96.0.51"], [k.port(80, node_port=30001)], type="NodePort"),
    ]
    inputs = classify(objs)
    desired = compile_tables(inputs.services, inputs.slices, ProxyConfig(), inputs.ignored)
    assert [str(s) for s in desired.skipped] == [
        "Service default/zz-dup: tcp . 30001 is left out for this Service: Service default/aa-dup claims it too, "
        "and comes first by name; its other frontends are programmed"
    ]
    els = desired.tables[0].elements
    assert els["no-endpoint-nodeports"][("tcp", "30001")].comment == "default/aa-dup"
    assert els["no-endpoint-services"][("10.96.0.50", "tcp", "80")].comment == "default/zz-dup"


def test_ignored_services_are_not_errors() -> None:
    objs = [
        k.service("headless", ["None"], [k.port(80)]),
        k.endpoint_slice("headless-1", "headless", [k.endpoint("10.244.1.2")], [k.port(80)]),
        {**k.service("ext", ["10.96.0.3"], [k.port(80)]), "spec": {"type": "ExternalName", "externalName": "x.y"}},
        k.service("other", ["10.96.0.4"], [k.port(80)], labels={"service.kubernetes.io/service-proxy-name": "x"}),
    ]
    inputs = classify(objs)
    desired = compile_tables(inputs.services, inputs.slices, ProxyConfig(), inputs.ignored)
    assert inputs.skipped == () and desired.skipped == ()
    assert sorted(inputs.ignored) == ["default/ext", "default/headless", "default/other"]
    assert desired.services == 0


def test_service_proxy_name_selects_labelled_services() -> None:
    objs = [
        k.service("mine", ["10.96.0.4"], [k.port(80)], labels={"service.kubernetes.io/service-proxy-name": "nftproxy"}),
        k.service("plain", ["10.96.0.5"], [k.port(80)]),
    ]
    inputs = classify(objs, proxy_name="nftproxy")
    assert [s.name for s in inputs.services] == ["mine"]


def test_longest_names_give_comments_nft_accepts() -> None:
    """namespace/name:port of valid Kubernetes names can reach 143 characters; nft refuses a
    comment over 128 (the whole transaction with it). Comments are cut in the middle."""
    ns, name = "n" * 63, "s" * 63
    objs = [
        k.service(name, ["10.96.0.1"], [k.port(80, "p" * 15)], namespace=ns),
        k.service("short", ["10.96.0.2"], [k.port(80, "http")]),
    ]
    inputs = classify(objs)
    ip = compile_tables(inputs.services, inputs.slices, ProxyConfig()).tables[0]
    long_one = ip.elements["no-endpoint-services"][("10.96.0.1", "tcp", "80")].comment
    assert long_one is not None and len(long_one) == 127
    assert long_one == f"{ns[:60]}...{('/' + name)[-48:]}:{'p' * 15}"
    assert ip.elements["no-endpoint-services"][("10.96.0.2", "tcp", "80")].comment == "default/short:http"
