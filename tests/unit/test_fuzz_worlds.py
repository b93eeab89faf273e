"""The differential fuzzer's worlds (tests/conformance/worlds.py), without a kernel or an apiserver:
a seed makes one world, the worlds cover what they should, and only what kube-proxy resolves
the same way every time."""

from __future__ import annotations

import itertools
import json

from testkit.k8s import objects as k
from tests.conformance import cases as c
from tests.conformance import worlds

SEEDS = range(400)


def _services(w: worlds.World) -> list[c.Obj]:
    return [o for o in w.objects if o["kind"] == "Service"]


def test_a_seed_makes_one_world_and_its_probes() -> None:
    for seed in (0, 1, 7, 12345):
        one, two = worlds.generate(seed), worlds.generate(seed)
        assert json.dumps(one.objects) == json.dumps(two.objects)
        assert worlds.probes(seed, _services(one)) == worlds.probes(seed, _services(two))
    assert json.dumps(worlds.generate(1).objects) != json.dumps(worlds.generate(2).objects)


def test_worlds_cover_every_kind_of_object_the_brief_names() -> None:
    seen: set[str] = set()
    for seed in SEEDS:
        seen |= worlds.generate(seed).features
    want = {
        "type:ClusterIP", "type:NodePort", "type:LoadBalancer", "type:ExternalName", "type:headless",
        "proto:TCP", "proto:UDP", "port:both-protocols", "nodePort:both-protocols", "targetPort:named",
        "families:(4,)", "families:(6,)", "families:(4, 6)", "families:(6, 4)",
        "externalIPs", "externalIP:node", "eTP:Local", "iTP:Local", "affinity",
        "lb-ingress", "lb-ingress-on-non-lb", "ipMode:Proxy", "ipMode:VIP", "no-lb-nodeports",
        "source-ranges", "source-ranges:annotation", "loadBalancerClass",
        "trafficDistribution:PreferClose", "trafficDistribution:PreferSameZone",
        "trafficDistribution:PreferSameNode", "topology-mode", "hints:zones", "hints:nodes",
        "service-proxy-name", "service-proxy-name:slice", "headless-label:service", "headless-label:slice",
        "slices:several", "slice:other-family", "slice:no-ports", "slice:no-service-label", "slice:orphan",
        "slice-port:missing", "slice-port:name-mismatch", "slice-port:no-number", "slice-port:unserved",
        "duplicate:same-slice", "duplicate:across-slices",
        "endpoint:wrong-node", "endpoint:no-node", "endpoint:host-network", "endpoint:two-addresses",
        "takeover:clusterIP", "takeover:externalIP", "takeover:lb",
        "spelling:clusterIP", "spelling:externalIP", "spelling:lb-ip", "spelling:endpoint",
    }  # fmt: skip
    want |= {f"conditions:{''.join(t)}" for t in itertools.product("TFU", repeat=3)} - {"conditions:TTF"}
    assert want <= seen, sorted(want - seen)


def test_endpoints_are_the_labs_pods_on_the_ports_they_serve() -> None:
    addresses = {a for _, v4, v6 in (*c.PODS.values(), *c.HOSTS.values()) for a in (v4, v6)}
    served = {"TCP": {*c.POD_TCP, *c.HOST_TCP, 7777}, "UDP": {*c.POD_UDP, *c.HOST_UDP, 7777}}
    for seed in SEEDS:
        for s in worlds.generate(seed).objects:
            if s["kind"] != "EndpointSlice":
                continue
            for e in s["endpoints"]:
                assert {worlds.ip(a) for a in e["addresses"]} <= addresses, (seed, e)
            for p in s.get("ports") or []:
                assert "port" not in p or p["port"] in served[p.get("protocol", "TCP")], (seed, p)


def _winner(slices: tuple[c.Obj, ...], addr: str) -> str | None:
    """kube-proxy's copy of an address walking the slices in this order
    (endpointslicecache.go addEndpoints: a later copy replaces unless it is terminating)."""
    got = None
    for s in slices:
        for e in s["endpoints"]:
            if worlds.ip(e["addresses"][0]) == addr and (got is None or not e["conditions"].get("terminating", False)):
                got = e
    return None if got is None else json.dumps(got, sort_keys=True)


def test_duplicate_endpoints_resolve_alike_in_every_order_of_the_slices() -> None:
    duplicates = 0
    for seed in SEEDS:
        objects = worlds.generate(seed).objects
        for svc in (o for o in objects if o["kind"] == "Service"):
            for fam in ("IPv4", "IPv6"):
                group = [
                    o
                    for o in objects
                    if o["kind"] == "EndpointSlice"
                    and o["addressType"] == fam
                    and (o["metadata"].get("labels") or {}).get(k.SERVICE_NAME) == svc["metadata"]["name"]
                ]
                for addr in {worlds.ip(e["addresses"][0]) for s in group for e in s["endpoints"]}:
                    holders = [s for s in group if any(worlds.ip(e["addresses"][0]) == addr for e in s["endpoints"])]
                    duplicates += len(holders) > 1
                    assert len({_winner(o, addr) for o in itertools.permutations(holders)}) == 1, (seed, addr)
    assert duplicates > 20  # the check met duplicates across slices


def test_affinity_services_have_only_endpoints_that_answer() -> None:
    """A sticky client of an endpoint that refuses would be a coin toss between the two labs."""
    for seed in SEEDS:
        objects = worlds.generate(seed).objects
        sticky = {o["metadata"]["name"] for o in objects if o["kind"] == "Service" and o["spec"].get("sessionAffinity")}
        for s in objects:
            if s["kind"] == "EndpointSlice" and (s["metadata"].get("labels") or {}).get(k.SERVICE_NAME) in sticky:
                for p in s.get("ports") or []:
                    assert p.get("port") in (None, *c.POD_TCP, *c.POD_UDP), (seed, p)
                for e in s["endpoints"]:
                    addr = worlds.ip(e["addresses"][0])
                    pod = next(n for n, (_, v4, v6) in {**c.PODS, **c.HOSTS}.items() if addr in (v4, v6))
                    assert pod in c.PODS and pod not in worlds.STICKY_AVOID, (seed, pod)
                    assert e.get("nodeName") in (None, c.PODS[pod][0]), (seed, e)


def test_a_frontend_two_services_claim_is_tagged_with_its_difference() -> None:
    http = [k.port(80, "http", "TCP", target=8080)]
    a = k.service("a", ["10.96.100.1"], http, namespace=worlds.NS, ipFamilies=["IPv4"], externalIPs=["198.19.4.1"])
    b = k.service("b", ["10.96.100.2"], http, namespace=worlds.NS, ipFamilies=["IPv4"], externalIPs=["198.19.4.1"])
    d = k.service("d", ["10.96.100.3"], http, namespace=worlds.NS, ipFamilies=["IPv4"], externalIPs=["10.96.100.1"])
    assert worlds.contested([a, b]) == {("198.19.4.1", "tcp", 80): "takeover-ext-contested"}
    assert worlds.contested([a, d]) == {("10.96.100.1", "tcp", 80): "takeover-dns-contested"}
    tags = {(t.probe.host, t.probe.port): t.case for t in worlds.probes(3, [a, b])}
    assert tags.get(("198.19.4.1", 80)) == "takeover-ext-contested"
    assert tags.get(("10.96.100.1", 80)) == "fuzz-3"
    # not contested: another protocol, an IP of a family the Service lacks, another proxy's Service
    udp = k.service("u", ["10.96.100.4"], [k.port(80, "h", "UDP")], namespace=worlds.NS, ipFamilies=["IPv4"],
                    externalIPs=["198.19.4.1"])  # fmt: skip
    other = json.loads(json.dumps(b))
    other["metadata"]["labels"] = {"service.kubernetes.io/service-proxy-name": "x"}
    proxy_mode = json.loads(json.dumps(b))
    del proxy_mode["spec"]["externalIPs"]
    proxy_mode["status"] = {"loadBalancer": {"ingress": [{"ip": "198.19.4.1", "ipMode": "Proxy"}]}}
    for rival in (udp, other, proxy_mode):
        assert worlds.contested([a, rival]) == {}


def test_every_world_has_probes_and_a_negative_one() -> None:
    for seed in SEEDS:
        probes = worlds.probes(seed, _services(worlds.generate(seed)))
        assert any(t.probe.what == "unallocated" for t in probes), seed
        assert len(probes) <= worlds.MAX_PROBES + 2 * 5 + 1


def test_probes_where_nftproxy_differs_on_purpose_are_tagged_with_the_difference() -> None:
    """A localhost NodePort whose slices put an endpoint on a port it does not serve, and one
    client through the ClusterIP and a Local-policy frontend of an affinity Service."""
    np = k.port(80, "http", "TCP", 31001, target=8080)
    svc = k.service("a", ["10.96.100.1"], [np], namespace=worlds.NS, type="NodePort", ipFamilies=["IPv4"])
    refusing = k.endpoint_slice("a-0", "a", [k.endpoint(c.PODS["a1"][1])], [k.port(7777, "http")], namespace=worlds.NS)
    serving = k.endpoint_slice("a-0", "a", [k.endpoint(c.PODS["a1"][1])], [k.port(8080, "http")], namespace=worlds.NS)
    assert worlds.refusing_families(svc, [refusing]) == {"IPv4"}
    assert worlds.refusing_families(svc, [serving]) == set()
    assert worlds.refusing_families(svc, [{**refusing, "endpoints": None}]) == set()  # as stored when empty
    for seed in range(40):  # the localhost probe is drawn now and then
        tags = {t.case for t in worlds.probes(seed, [svc], [refusing]) if t.probe.host == "127.0.0.1"}
        assert tags <= {worlds.LOCALHOST_REFUSED}
        tags = {t.case for t in worlds.probes(seed, [svc], [serving]) if t.probe.host == "127.0.0.1"}
        assert tags <= {f"fuzz-{seed}"}
    sticky = json.loads(json.dumps(svc))
    sticky["spec"].update(sessionAffinity="ClientIP", externalTrafficPolicy="Local")
    hops = [t for s in range(40) for t in worlds.probes(s, [sticky]) if t.probe.then]
    assert hops and all(t.case == worlds.AFFINITY_LOCAL for t in hops)
    del sticky["spec"]["externalTrafficPolicy"]  # Cluster: one record, as kube-proxy
    hops = [t for s in range(40) for t in worlds.probes(s, [sticky]) if t.probe.then]
    assert hops and all(t.case.startswith("fuzz-") for t in hops)


def test_a_sticky_client_goes_through_the_frontends_of_one_service_port_and_family() -> None:
    """Each Service port and each family has an affinity of its own: a client through two of
    them may get two endpoints in either proxy."""
    ports = [k.port(80, "http", "TCP", 31001, target=8080), k.port(81, "alt", "TCP", 31002, target=8081)]
    svc = k.service(
        "a", ["10.96.100.1", "fd00:10:96::c001"], ports, namespace=worlds.NS, type="NodePort",
        ipFamilies=["IPv4", "IPv6"], ipFamilyPolicy="RequireDualStack", sessionAffinity="ClientIP",
        externalIPs=["198.19.4.1", "fd00:198:19::4:1"],
    )  # fmt: skip
    seen = 0
    for seed in range(60):
        for t in worlds.probes(seed, [svc]):
            if t.probe.then:
                seen += 1
                assert (t.probe.host, t.probe.port) == ("10.96.100.1", 80)
                assert {(h, n) for _, h, n in t.probe.then} <= {(c.NODE4, 31001), ("198.19.4.1", 80)}
    assert seen


def test_a_health_check_counting_endpoints_of_ports_the_service_lacks_is_tagged_with_the_difference() -> None:
    """kube-proxy counts this node's ready endpoints of every port of the Service's slices; where
    that differs from the count of the Service's own ports the row is the intentional difference,
    and only when both proxies answer those counts."""
    http = [k.port(80, "http", "TCP", 31001, target=8080)]
    svc = k.service(
        "a", ["10.96.100.1"], http, namespace=worlds.NS, type="LoadBalancer", ipFamilies=["IPv4"],
        externalTrafficPolicy="Local", healthCheckNodePort=31500,
    )  # fmt: skip

    def ep(pod: str, ready: bool = True) -> c.Obj:
        return k.endpoint(c.PODS[pod][1], ready=ready, node=c.PODS[pod][0])

    own = k.endpoint_slice("a-0", "a", [ep("a1"), ep("b1")], [k.port(8080, "http")], namespace=worlds.NS)
    other = k.endpoint_slice("a-1", "a", [ep("a2")], [k.port(8081, "old")], namespace=worlds.NS)
    udp = k.endpoint_slice("a-2", "a", [ep("a3")], [k.port(8080, "http", "UDP")], namespace=worlds.NS)
    gone = k.endpoint_slice("a-3", "a", [ep("a3", ready=False)], [k.port(8081, "old")], namespace=worlds.NS)
    [hp] = worlds.health_checks(5, [svc], [own, other])
    assert (hp.check.port, hp.check.host, hp.case, hp.kube_proxy, hp.own_ports) == (
        31500,
        c.NODE4,
        worlds.HEALTH_OTHER_PORTS,
        2,
        1,
    )
    assert hp.explained("HTTP 200 localEndpoints=2 weight=2", "HTTP 200 localEndpoints=1 weight=1")
    assert not hp.explained("HTTP 200 localEndpoints=2 weight=2", "HTTP 200 localEndpoints=2 weight=2")
    assert worlds.health_checks(5, [svc], [own, udp])[0].case == worlds.HEALTH_OTHER_PORTS  # another protocol
    proxy_name = json.loads(json.dumps(other))  # the label filters Services, not slices (seed 4)
    proxy_name["metadata"]["labels"]["service.kubernetes.io/service-proxy-name"] = "other-proxy"
    assert worlds.health_checks(5, [svc], [own, proxy_name])[0].kube_proxy == 2
    headless = json.loads(json.dumps(other))
    headless["metadata"]["labels"]["service.kubernetes.io/headless"] = ""
    no_label = {**other, "metadata": {**other["metadata"], "labels": {}}}
    for alike in ([own], [own, gone], [own, no_label], [own, headless]):
        [hp] = worlds.health_checks(5, [svc], alike)
        assert (hp.case, hp.kube_proxy, hp.own_ports) == ("fuzz-5", 1, 1)


def test_legacy_spellings_are_read_as_kube_proxy_reads_them() -> None:
    """An address in a legacy spelling is probed, claimed and counted as the address kube-proxy
    reads (ParseIPSloppy): leading zeros are decimal, an IPv4-mapped address is IPv4."""
    assert worlds.ip("010.096.100.001") == worlds.ip("::ffff:10.96.100.1") == "10.96.100.1"
    assert not worlds.is_v6("::ffff:198.19.4.1")
    http = [k.port(80, "http", "TCP", target=8080)]
    a = k.service("a", ["010.096.100.001"], http, namespace=worlds.NS, ipFamilies=["IPv4"],
                  externalIPs=["198.019.004.001"])  # fmt: skip
    b = k.service("b", ["10.96.100.2"], http, namespace=worlds.NS, ipFamilies=["IPv4"],
                  externalIPs=["::ffff:198.19.4.1"])  # fmt: skip
    assert worlds.contested([a, b]) == {("198.19.4.1", "tcp", 80): "takeover-ext-contested"}
    hosts = {t.probe.host for t in worlds.probes(3, [a, b])}
    assert {"10.96.100.1", "198.19.4.1"} <= hosts
    assert not any("::ffff:" in h or "010." in h for h in hosts)
