"""The differential suite's catalog: API objects, and the connections made to each of them.

Topology (the same in both labs, see harness.py): node-1 (zone-a, the proxied node: kube-proxy in
lab A, nftproxy in lab B) with pods a1, a2, a3, c1 (c1 is the client pod, and an endpoint for
hairpin) and a host-network server ``host-1`` on the node's own address; node-2 (zone-b, no proxy)
with pods b1, b2, c2 (a client pod on another node) and ``host-2``. Outside clients ext1
(198.18.0.100, fd00:198:18::100) and ext2 (198.18.0.101, fd00:198:18::101) on the node network
route the LoadBalancer/external ranges via node-1.

Every pod serves TCP 8080, 8081, 9090 and UDP 5353, 5354, 9090; the host servers TCP 8090, 8091 and
UDP 5390. Each :class:`Case` is one Service (or a few objects) with the probes to make against it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from testkit.k8s import objects as k

Obj = dict[str, Any]
NS = "conf"
NODE = "node-1"  # the proxied node's name (both proxies)
OTHER = "node-2"
ZONE, OTHER_ZONE = "zone-a", "zone-b"
NODE4, NODE6 = "198.18.0.1", "fd00:198:18::1"
NODE2_4 = "198.18.0.2"
GW4, GW6 = "10.244.1.1", "fd00:10:244:1::1"
# a ServiceCIDR created during the change cases (chg-service-cidr-added); the apiserver's own
# ServiceCIDR "kubernetes" is netlab's SERVICE4/SERVICE6
EXTRA_SERVICE_CIDR4 = "10.97.0.0/24"  # the node's pod-network gateway addresses (NetLab)
# a ServiceCIDR of one narrow and one too wide CIDR, there from the start (address_spelling_cases);
# both routed by node-1 to ext1, which answers every address of them (harness.build_lab)
TWO_WIDTHS_SERVICE_CIDR = ("10.98.0.0/24", "2000::/12")
# The last release whose apiserver can be told to store the legacy address spellings (its gate
# StrictIPCIDRValidation turned off: tests/conformance/conftest.py); from 1.38 the gate is GA and
# locked on. A cluster upgraded since still holds the objects stored before, but a lab cannot
# write them: against a later release, the cases marked ``legacy`` are left out (and listed). kube-proxy
# 1.38 reads these fields with the same ParseIPSloppy (the same k8s.io/utils) as 1.37.2.
LAX_VALIDATION_UNTIL = 37

# Pod addresses, in the order harness.build_lab creates them (asserted there).
PODS: dict[str, tuple[str, str, str]] = {  # name -> (node, ipv4, ipv6)
    "a1": (NODE, "10.244.1.2", "fd00:10:244:1::2"),
    "a2": (NODE, "10.244.1.3", "fd00:10:244:1::3"),
    "a3": (NODE, "10.244.1.4", "fd00:10:244:1::4"),
    "c1": (NODE, "10.244.1.5", "fd00:10:244:1::5"),
    "b1": (OTHER, "10.244.2.2", "fd00:10:244:2::2"),
    "b2": (OTHER, "10.244.2.3", "fd00:10:244:2::3"),
    "c2": (OTHER, "10.244.2.4", "fd00:10:244:2::4"),  # a client pod on the other node
}
HOSTS: dict[str, tuple[str, str, str]] = {
    "host-1": (NODE, NODE4, NODE6),
    "host-2": (OTHER, NODE2_4, "fd00:198:18::2"),
}
POD_TCP = (8080, 8081, 9090)
POD_UDP = (5353, 5354, 9090)
HOST_TCP, HOST_UDP = (8090, 8091), (5390,)  # 8091: no Service targets it (extip-node-ip-no-endpoints)

SOURCES = ("pod", "node", "ext1", "ext2", "pod2")
# both proxies' --nodeport-addresses / nodePortAddresses: the node's IPs, and loopback (TCP NodePorts
# served in userspace, UDP/SCTP ones rejected: kube-proxy v1.37 with KubeProxyNFTablesLocalhostNodePorts)
NODEPORT_ADDRESSES = ("primary", "localhost")  # pod2: only to NodePorts (no route to LB IPs)


@dataclass(frozen=True)
class Probe:
    src: str  # pod | node | ext1 | ext2 | pod2
    proto: str  # tcp | udp
    host: str
    port: int
    what: str  # ClusterIP, NodePort, LB, externalIP, ...
    sticky: bool = False  # session affinity: compare how many backends each client got
    # sticky across frontends: the same client then goes through these (what, host, port) too,
    # and the backends it reached through all of them are counted together
    then: tuple[tuple[str, str, int], ...] = ()

    def path(self) -> str:
        def one(what: str, host: str, port: int) -> str:
            h = f"[{host}]" if ":" in host else host
            return f"{what} {h}:{port}"

        hops = " → ".join(one(*f) for f in ((self.what, self.host, self.port), *self.then))
        return f"{self.src} → {hops}/{self.proto}"


@dataclass(frozen=True)
class HealthCheck:
    port: int
    ipv6: bool = False
    host: str = NODE4  # the node's address the client asks on


@dataclass
class Case:
    name: str
    objects: list[Obj]
    probes: list[Probe] = field(default_factory=list)
    health: list[HealthCheck] = field(default_factory=list)
    rules_mention: str | None = None  # check that neither proxy programs this Service
    node_addresses: tuple[str, ...] = ()  # node-1 holds these on eth0 in both labs (a VIP, as kube-vip)
    legacy: bool = False  # objects only an apiserver with lax address validation stores (LAX_VALIDATION_UNTIL)


# --------------------------------------------------------------------------- builders

_v4 = (f"10.96.10.{i}" for i in itertools.count(10))
_v6 = (f"fd00:10:96::{0xA00 + i:x}" for i in itertools.count(10))
_lb = (f"198.19.1.{i}" for i in itertools.count(10))
_ext = (f"198.19.2.{i}" for i in itertools.count(10))
_np = iter(range(30100, 32000))
_hc = iter(range(32100, 32700))


def port(port: int, target: int | str, name: str = "", proto: str = "TCP", node_port: int | None = None) -> Obj:
    p = k.port(port, name, proto, node_port, target=target)
    if not name:
        del p["name"]
    return p


def service(
    name: str,
    ports: Sequence[Obj],
    *,
    type: str = "ClusterIP",
    families: Sequence[int] = (4,),
    lb_ingress: Sequence[Obj] = (),
    labels: Obj | None = None,
    annotations: Obj | None = None,
    **spec: Any,
) -> Obj:
    ips = [next(_v4) if f == 4 else next(_v6) for f in families]
    if type != "ClusterIP":  # every NodePort explicit: a random one could take a later explicit port
        ports = [p if p.get("nodePort") else {**p, "nodePort": next(_np)} for p in ports]
    return k.service(
        name,
        ips,
        ports,
        namespace=NS,
        type=type,
        lb_ingress=lb_ingress,
        labels=labels or None,
        annotations=annotations,
        ipFamilies=["IPv4" if f == 4 else "IPv6" for f in families],
        ipFamilyPolicy="RequireDualStack" if len(families) == 2 else "SingleStack",
        **spec,
    )


def ep(
    pod: str,
    *,
    ready: bool | None = True,
    serving: bool | None = True,
    terminating: bool | None = False,
    family: int = 4,
    node: str | None = "",
    zones: Sequence[str] | None = None,
    nodes: Sequence[str] | None = None,
) -> Obj:
    """An endpoint for a pod (or host server); a None condition is left out (unset)."""
    where, v4, v6 = PODS.get(pod) or HOSTS[pod]
    e = k.endpoint(
        v4 if family == 4 else v6,
        ready=ready,
        serving=serving,
        terminating=terminating,
        node=where if node == "" else node,
        for_zones=zones,
        for_nodes=nodes,
    )
    if serving is None:
        e["conditions"].pop("serving", None)
    return e


def eslice(
    svc: str,
    suffix: str,
    endpoints: Iterable[Obj],
    ports: Sequence[Obj] | None,
    *,
    family: int = 4,
    labelled: bool = True,
    labels: Obj | None = None,
) -> Obj:
    return k.endpoint_slice(
        f"{svc}-{suffix}",
        svc if labelled else None,
        endpoints,
        ports,
        namespace=NS,
        address_type="IPv4" if family == 4 else "IPv6",
        labels={"endpointslice.kubernetes.io/managed-by": "conformance", **(labels or {})} if labelled else labels,
    )


def sport(port: int, name: str = "", proto: str = "TCP") -> Obj:
    """An EndpointSlice port."""
    return k.port(port, name, proto)


def frontends(
    svc: Obj, sources_cluster: Sequence[str] = ("pod", "node"), sources_external: Sequence[str] = SOURCES
) -> Iterator[Probe]:
    """Probes for every frontend of a Service: each ClusterIP (from a pod and the node), each
    NodePort on the node's addresses, each LoadBalancer IP and externalIP (from every source)."""
    spec = svc["spec"]
    fams = [4 if f == "IPv4" else 6 for f in spec["ipFamilies"]]
    lb = [i["ip"] for i in (svc.get("status") or {}).get("loadBalancer", {}).get("ingress", []) if "ip" in i]
    for p in spec["ports"]:
        proto = p["protocol"].lower()
        for ip in spec["clusterIPs"]:
            for s in sources_cluster:
                yield Probe(s, proto, ip, p["port"], "ClusterIP")
        if p.get("nodePort"):
            for f in fams:
                for s in sources_external:
                    yield Probe(s, proto, NODE4 if f == 4 else NODE6, p["nodePort"], "NodePort")
        for ip in lb:
            for s in (s for s in sources_external if s != "pod2"):
                yield Probe(s, proto, ip, p["port"], "LB")
        for ip in spec.get("externalIPs", []):
            for s in (s for s in sources_external if s != "pod2"):
                yield Probe(s, proto, ip, p["port"], "externalIP")


def simple(
    name: str, svc_ports: Sequence[Obj], endpoints: Sequence[Obj], slice_ports: Sequence[Obj], **kw: Any
) -> Case:
    svc = service(name, svc_ports, **kw)
    return Case(name, [svc, eslice(name, "a", endpoints, slice_ports)], list(frontends(svc)))


HTTP = [port(80, 8080, "http")]
HTTP_EP = [sport(8080, "http")]


# --------------------------------------------------------------------------- the catalog


def catalog() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    # ---- Service types and port shapes
    c = simple("cip-basic", [port(80, 8080)], [ep("a1"), ep("b1")], [sport(8080)])
    c.probes.append(Probe("pod", "tcp", c.objects[0]["spec"]["clusterIP"], 81, "ClusterIP unknown port"))
    c.probes.append(Probe("pod", "udp", c.objects[0]["spec"]["clusterIP"], 80, "ClusterIP unknown proto"))
    add(c)
    add(
        simple(
            "cip-multiport",
            [port(80, "http", "http"), port(53, "dns", "dns", "UDP"), port(9090, 9090, "metrics")],
            [ep("a1"), ep("b2")],
            [sport(8080, "http"), sport(5353, "dns", "UDP"), sport(9090, "metrics")],
        )
    )
    add(
        simple(
            "cip-tcp-udp-same-port",
            [port(53, 9090, "t"), port(53, 9090, "u", "UDP")],
            [ep("a2")],
            [sport(9090, "t"), sport(9090, "u", "UDP")],
        )
    )
    add(  # the slice names its port differently from the Service: no endpoint for that port
        simple("cip-port-name-mismatch", [port(80, "http", "http")], [ep("a1")], [sport(8080, "web")])
    )
    c = simple(
        "np-basic", [port(80, 8080, "http", node_port=next(_np))], [ep("a1"), ep("b1")], HTTP_EP, type="NodePort"
    )
    np_port = c.objects[0]["spec"]["ports"][0]["nodePort"]
    c.probes += [  # NodePorts on loopback (kube-proxy's nftables mode has no localhost NodePorts)
        Probe("node", "tcp", "127.0.0.1", np_port, "NodePort on localhost"),
        Probe("node", "tcp", NODE2_4, np_port, "NodePort on another node"),
    ]
    add(c)
    same = next(_np)
    add(
        simple(
            "np-same-number-tcp-udp",
            [port(53, 8081, "t", node_port=same), port(53, 5353, "u", "UDP", node_port=same)],
            [ep("a3"), ep("b2")],
            [sport(8081, "t"), sport(5353, "u", "UDP")],
            type="NodePort",
        )
    )
    add(
        simple(
            "lb-two-ips",
            [port(80, 8080, "http", node_port=next(_np))],
            [ep("a2"), ep("b2")],
            HTTP_EP,
            type="LoadBalancer",
            lb_ingress=[{"ip": next(_lb)}, {"ip": next(_lb)}],
        )
    )
    add(
        simple(
            "lb-ipmode-proxy",
            [port(80, 8080, "http", node_port=next(_np))],
            [ep("a1")],
            HTTP_EP,
            type="LoadBalancer",
            lb_ingress=[{"ip": next(_lb), "ipMode": "Proxy"}, {"ip": next(_lb), "ipMode": "VIP"}],
        )
    )
    add(
        simple(
            "extip-node-ip",
            [port(8888, 8080, "http")],
            [ep("a1"), ep("b1")],
            HTTP_EP,
            externalIPs=[NODE4],
        )
    )
    add(simple("extip", [port(80, 8080, "http")], [ep("a2"), ep("b1")], HTTP_EP, externalIPs=[next(_ext)]))
    add(simple("no-endpoints-cip", HTTP, [], HTTP_EP))
    nosl = service("no-slice-np", [port(80, 8080, "http", node_port=next(_np))], type="NodePort")
    add(Case("no-slice-np", [nosl], list(frontends(nosl))))

    # ---- traffic policies
    for name, eps, kind in (
        ("etp-local-np", [ep("a1"), ep("b1")], "NodePort"),
        ("etp-local-np-remote-only", [ep("b1")], "NodePort"),
        ("etp-local-lb", [ep("a1"), ep("a2"), ep("b1")], "LoadBalancer"),
        ("etp-local-lb-remote-only", [ep("b1"), ep("b2")], "LoadBalancer"),
        ("etp-local-lb-terminating-only", [ep("a1", ready=False, terminating=True), ep("b1")], "LoadBalancer"),
        (
            "etp-local-lb-local-notready",
            [ep("a1", ready=False, serving=False), ep("b1")],
            "LoadBalancer",
        ),
    ):
        extra: dict[str, Any] = {}
        if kind == "LoadBalancer":
            extra = {"lb_ingress": [{"ip": next(_lb)}], "healthCheckNodePort": next(_hc)}
        c = simple(
            name,
            [port(80, 8080, "http", node_port=next(_np))],
            eps,
            HTTP_EP,
            type=kind,
            externalTrafficPolicy="Local",
            **extra,
        )
        if kind == "LoadBalancer":
            c.health.append(HealthCheck(extra["healthCheckNodePort"]))
        if name == "etp-local-lb":  # the health port on the primary IPs of the Service's families only
            c.health += [HealthCheck(extra["healthCheckNodePort"], host=h) for h in (NODE6, GW4, GW6)]
        add(c)
    add(
        simple(
            "etp-local-extip",
            [port(80, 8080, "http")],
            [ep("a3"), ep("b2")],
            HTTP_EP,
            externalIPs=[next(_ext)],
            externalTrafficPolicy="Local",
        )
    )
    for name, eps in (
        ("itp-local", [ep("a1"), ep("b1")]),
        ("itp-local-remote-only", [ep("b1"), ep("b2")]),
        ("itp-local-terminating-local", [ep("a1", ready=False, terminating=True), ep("b1")]),
        ("itp-local-none", [ep("a1", ready=False, serving=False)]),
    ):
        add(simple(name, HTTP, eps, HTTP_EP, internalTrafficPolicy="Local"))
    add(
        simple(
            "itp-local-etp-local-np",
            [port(80, 8080, "http", node_port=next(_np))],
            [ep("a2"), ep("b1")],
            HTTP_EP,
            type="NodePort",
            internalTrafficPolicy="Local",
            externalTrafficPolicy="Local",
        )
    )

    # ---- endpoint conditions, every combination of true/false/unset (ready, serving, terminating)
    vals: list[bool | None] = [True, False, None]
    for i, (r, s, t) in enumerate(itertools.product(vals, vals, vals)):
        tag = "".join("T" if v else ("F" if v is False else "U") for v in (r, s, t))
        hc = next(_hc)
        name = f"cond-{tag.lower()}-alone"
        svc = service(
            name,
            [port(80, 8080, "http", node_port=next(_np))],
            type="LoadBalancer",
            externalTrafficPolicy="Local",
            healthCheckNodePort=hc,
        )
        probes = [p for p in frontends(svc, ("pod",), ("ext1",))]
        add(
            Case(
                name,
                [svc, eslice(name, "a", [ep("a1", ready=r, serving=s, terminating=t)], HTTP_EP)],
                probes,
                [HealthCheck(hc)],
            )
        )
        name = f"cond-{tag.lower()}-with-ready"
        svc = service(name, HTTP)
        add(
            Case(
                name,
                [svc, eslice(name, "a", [ep("a1", ready=r, serving=s, terminating=t), ep("b1")], HTTP_EP)],
                list(frontends(svc, ("pod",), ())),
            )
        )
        del i

    # ---- slices: duplicates, no ports, no labels, several slices
    # v1.36+ (kubernetes#135593): of two copies of an ip:port the non-terminating one wins; before,
    # the copy on this node did. Two non-terminating copies are chosen in Go's map order upstream
    # (random), so every case here has exactly one terminating copy.
    dup = "dup-across-slices-itp-local"
    svc = service(dup, HTTP, internalTrafficPolicy="Local")
    add(
        Case(
            dup,
            [
                svc,
                eslice(dup, "a", [ep("a1", node=OTHER)], HTTP_EP),  # says another node
                eslice(dup, "b", [ep("a1", ready=False, serving=True, terminating=True)], HTTP_EP),  # this node
            ],
            list(frontends(svc, ("pod",), ())),
        )
    )
    dup = "dup-across-slices-etp-local"
    svc = service(dup, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", externalTrafficPolicy="Local")
    add(
        Case(
            dup,
            [
                svc,
                eslice(dup, "a", [ep("a2", ready=False, serving=True, terminating=True), ep("b1")], HTTP_EP),
                eslice(dup, "b", [ep("a2", node=OTHER)], HTTP_EP),
            ],
            list(frontends(svc, ("pod",), ("ext1",))),
        )
    )
    dup = "dup-across-slices-remote-terminating"
    svc = service(dup, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", externalTrafficPolicy="Local")
    add(
        Case(
            dup,
            [
                svc,
                eslice(dup, "a", [ep("a3", node=OTHER, ready=False, serving=True, terminating=True)], HTTP_EP),
                eslice(dup, "b", [ep("a3")], HTTP_EP),
            ],
            list(frontends(svc, ("pod",), ("ext1",))),
        )
    )
    dup = "dup-in-one-slice-itp-local"
    svc = service(dup, HTTP, internalTrafficPolicy="Local")
    add(
        Case(
            dup,
            [
                svc,
                eslice(
                    dup, "a", [ep("a1", ready=False, serving=True, terminating=True), ep("a1", node=OTHER)], HTTP_EP
                ),
            ],
            list(frontends(svc, ("pod",), ())),
        )
    )
    name = "slice-without-ports"
    svc = service(name, HTTP)
    add(Case(name, [svc, eslice(name, "a", [ep("a1")], None)], list(frontends(svc, ("pod",), ()))))
    name = "slice-without-label"
    svc = service(name, HTTP)
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1")], HTTP_EP), eslice(name, "b", [ep("b1")], HTTP_EP, labelled=False)],
            list(frontends(svc, ("pod",), ())),
        )
    )
    name = "two-slices-different-target-ports"
    svc = service(name, [port(80, "web", "web")])
    add(
        Case(
            name,
            [
                svc,
                eslice(name, "a", [ep("a1")], [sport(8080, "web")]),
                eslice(name, "b", [ep("b1")], [sport(8081, "web")]),
            ],
            list(frontends(svc, ("pod",), ())),
        )
    )
    name = "endpoint-without-node-name"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", externalTrafficPolicy="Local")
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a3", node=None), ep("b1")], HTTP_EP)],
            list(frontends(svc, ("pod",), ("ext1",))),
        )
    )

    # ---- session affinity
    name = "affinity-clientip"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )
    sticky = [
        Probe(p.src, p.proto, p.host, p.port, p.what, sticky=True)
        for p in frontends(svc, ("pod", "node"), ("ext1", "ext2"))
    ]
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1"), ep("a2"), ep("b1")], [sport(8080, "http"), sport(5353, "dns", "UDP")])],
            sticky,
        )
    )

    # ---- session affinity across frontends (issue 22): kube-proxy keeps one record per endpoint,
    # keyed by the client, so a client keeps its endpoint through the ClusterIP, the NodePort and
    # the externalIP of one Service port
    name = "affinity-across-frontends"
    ext_ip = next(_ext)
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        externalIPs=[ext_ip],
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )
    cip = svc["spec"]["clusterIPs"][0]
    hops: list[Probe] = []
    for sp in svc["spec"]["ports"]:
        proto, np_ = sp["protocol"].lower(), sp["nodePort"]
        hops.append(
            Probe(
                "pod",
                proto,
                cip,
                sp["port"],
                "ClusterIP",
                True,
                (("NodePort", NODE4, np_), ("externalIP", ext_ip, sp["port"]), ("ClusterIP", cip, sp["port"])),
            )
        )
        hops.append(Probe("ext1", proto, NODE4, np_, "NodePort", True, (("externalIP", ext_ip, sp["port"]),)))
    eps3 = [ep("a1"), ep("a2"), ep("b1")]
    add(Case(name, [svc, eslice(name, "a", eps3, [sport(8080, "http"), sport(5353, "dns", "UDP")])], hops))

    # ---- session affinity on IPv6 (issue 22): kube-proxy has it on both families
    name = "affinity-ipv6"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        families=(6,),
        sessionAffinity="ClientIP",
        sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )
    cip6 = svc["spec"]["clusterIPs"][0]
    sticky6 = [dataclasses.replace(p, sticky=True) for p in frontends(svc, ("pod", "node"), ("ext1", "ext2"))]
    for sp in svc["spec"]["ports"]:
        sticky6.append(Probe("pod", sp["protocol"].lower(), cip6, sp["port"], "ClusterIP", True,
                             (("NodePort", NODE6, sp["nodePort"]),)))  # fmt: skip
    eps6 = [ep("a1", family=6), ep("a2", family=6), ep("b1", family=6)]
    add(
        Case(
            name,
            [svc, eslice(name, "a", eps6, [sport(8080, "http"), sport(5353, "dns", "UDP")], family=6)],
            sticky6,
        )
    )

    # ---- topology: hints, trafficDistribution, topology-mode annotation
    zone_eps = [ep("a1", zones=[ZONE]), ep("b1", zones=[OTHER_ZONE]), ep("b2", zones=[ZONE])]
    for name, eps, extra in (
        ("topo-zone-hints", zone_eps, {}),
        ("topo-zone-hints-preferclose", zone_eps, {"trafficDistribution": "PreferClose"}),
        ("topo-zone-hints-annotation-auto", zone_eps, {"annotations": {"service.kubernetes.io/topology-mode": "Auto"}}),
        (
            "topo-zone-hints-annotation-disabled",
            zone_eps,
            {"annotations": {"service.kubernetes.io/topology-mode": "Disabled"}},
        ),
        ("topo-zone-hint-missing", [ep("a1", zones=[ZONE]), ep("b1", zones=[OTHER_ZONE]), ep("b2")], {}),
        ("topo-zone-hints-not-for-us", [ep("a1", zones=[OTHER_ZONE]), ep("b1", zones=[OTHER_ZONE])], {}),
        ("topo-preferclose-no-hints", [ep("a1"), ep("b1")], {"trafficDistribution": "PreferClose"}),
        (
            "topo-zone-hints-notready-unhinted",
            [ep("a1", zones=[ZONE]), ep("b1", zones=[OTHER_ZONE]), ep("a2", ready=False, serving=False)],
            {},
        ),
        (
            "topo-node-hints",
            [
                ep("a1", zones=[ZONE], nodes=[NODE]),
                ep("a2", zones=[ZONE], nodes=[OTHER]),
                ep("b1", zones=[ZONE], nodes=[OTHER]),
            ],
            {"trafficDistribution": "PreferSameNode"},
        ),
        (
            "topo-node-hints-not-for-us",
            [ep("a1", zones=[ZONE], nodes=[OTHER]), ep("b1", zones=[OTHER_ZONE], nodes=[OTHER])],
            {"trafficDistribution": "PreferSameNode"},
        ),
        (
            "topo-zone-hints-etp-local",
            [ep("a1", zones=[OTHER_ZONE]), ep("b1", zones=[ZONE]), ep("b2", zones=[ZONE])],
            {"type": "NodePort", "externalTrafficPolicy": "Local"},
        ),
    ):
        ports = [port(80, 8080, "http", node_port=next(_np))] if extra.get("type") == "NodePort" else HTTP
        svc = service(name, ports, **extra)
        add(Case(name, [svc, eslice(name, "a", eps, HTTP_EP)], list(frontends(svc, ("pod",), ("ext1",)))))

    # ---- source ranges
    add(
        simple(
            "lb-source-ranges",
            [port(80, 8080, "http", node_port=next(_np))],
            [ep("a1"), ep("b1")],
            HTTP_EP,
            type="LoadBalancer",
            lb_ingress=[{"ip": next(_lb)}],
            loadBalancerSourceRanges=["198.18.0.100/32"],
        )
    )
    add(
        simple(
            "lb-source-ranges-etp-local",
            [port(80, 8080, "http", node_port=next(_np))],
            [ep("a2"), ep("b1")],
            HTTP_EP,
            type="LoadBalancer",
            lb_ingress=[{"ip": next(_lb)}],
            loadBalancerSourceRanges=["198.18.0.101/32", "10.244.0.0/16"],
            externalTrafficPolicy="Local",
            healthCheckNodePort=next(_hc),
        )
    )

    # ---- hairpin, host-network endpoints
    add(simple("hairpin", [port(80, 8080, "http", node_port=next(_np))], [ep("c1")], HTTP_EP, type="NodePort"))
    # v1.36+: hairpin traffic is masqueraded only for endpoints whose slice says this node
    # (on port 8081: kube-proxy's hairpin-connections set is keyed by endpoint port too, and the
    # case above puts c1:8080 in it; so these also check that key)
    alt, alt_ep = [port(80, 8081, "alt")], [sport(8081, "alt")]
    add(simple("hairpin-slice-says-other-node", alt, [ep("c1", node=OTHER)], alt_ep))
    add(simple("hairpin-slice-without-node", alt, [ep("c1", node=None)], alt_ep))
    add(
        simple(
            "host-network-local",
            [port(80, 8090, "http", node_port=next(_np)), port(53, 5390, "dns", "UDP")],
            [ep("host-1")],
            [sport(8090, "http"), sport(5390, "dns", "UDP")],
            type="NodePort",
        )
    )
    add(
        simple(
            "host-network-remote",
            [port(80, 8090, "http", node_port=next(_np))],
            [ep("host-2")],
            [sport(8090, "http")],
            type="NodePort",
        )
    )
    add(
        simple(
            "host-network-etp-local",
            [port(80, 8090, "http", node_port=next(_np))],
            [ep("host-1"), ep("host-2")],
            [sport(8090, "http")],
            type="NodePort",
            externalTrafficPolicy="Local",
        )
    )

    # ---- localhost NodePorts: from the node's own loopback (a userspace proxy in both)
    def lo_probes(svc: Obj) -> list[Probe]:
        fams = svc["spec"]["ipFamilies"]
        return [
            Probe("node", p["protocol"].lower(), lo, p["nodePort"], "NodePort localhost")
            for p in svc["spec"]["ports"]
            for lo in (["127.0.0.1"] if "IPv4" in fams else []) + (["::1"] if "IPv6" in fams else [])
        ]

    lo_ports = [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))]
    lo_eps = [sport(8080, "http"), sport(5353, "dns", "UDP")]
    name = "localhost-nodeport"
    svc = service(name, lo_ports, type="NodePort", families=(4, 6))
    objs = [
        svc,
        eslice(name, "v4", [ep("a1"), ep("b1")], lo_eps),
        eslice(name, "v6", [ep("a1", family=6), ep("b1", family=6)], lo_eps, family=6),
    ]
    add(Case(name, objs, lo_probes(svc)))
    name = "localhost-nodeport-etp-local"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", externalTrafficPolicy="Local")
    add(Case(name, [svc, eslice(name, "a", [ep("a2"), ep("b2")], HTTP_EP)], lo_probes(svc)))
    name = "localhost-nodeport-etp-local-none-here"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", externalTrafficPolicy="Local")
    add(Case(name, [svc, eslice(name, "a", [ep("b2")], HTTP_EP)], lo_probes(svc)))
    name = "localhost-nodeport-no-endpoints"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort")
    add(Case(name, [svc, eslice(name, "a", [], HTTP_EP)], lo_probes(svc)))
    name = "localhost-nodeport-affinity"
    svc = service(
        name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort",
        sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )  # fmt: skip
    probes = [dataclasses.replace(p, sticky=True) for p in lo_probes(svc)]
    add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("a2"), ep("b1")], HTTP_EP)], probes))

    # ---- Services no proxy programs
    name = "headless"
    svc = service(name, HTTP)
    svc["spec"].update(clusterIP="None", clusterIPs=["None"])
    add(Case(name, [svc, eslice(name, "a", [ep("a1")], HTTP_EP)], rules_mention=f"{NS}/{name}"))
    # v1.36+: service.kubernetes.io/headless filters EndpointSlices only; a ClusterIP Service
    # that carries it is proxied (v1.34 ignored the Service)
    headless = {"service.kubernetes.io/headless": ""}
    name = "headless-label-on-clusterip-service"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", labels=headless)
    add(Case(name, [svc, eslice(name, "a", [ep("a1")], HTTP_EP)], list(frontends(svc, ("pod",), ("ext1",)))))
    name = "headless-label-on-slice"
    svc = service(name, HTTP)
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1")], HTTP_EP, labels=headless), eslice(name, "b", [ep("b1")], HTTP_EP)],
            list(frontends(svc, ("pod",), ())),
        )
    )
    # ServiceCIDRs (kube-proxy v1.34+ too): an unallocated address of them is dropped; a live
    # ClusterIP's unknown port is rejected (from a pod; the node's own packets pass, as upstream)
    name = "service-cidr-unallocated"
    svc = service(name, HTTP, families=(4, 6))
    probes = [
        Probe(src, proto, host, 80, "unallocated")
        for src in ("pod", "node")
        for proto in ("tcp", "udp")
        for host in ("10.96.250.1", "fd00:10:96::fa01")
    ]
    probes += [
        Probe(src, "tcp", ip, 81, "ClusterIP unknown port")
        for src in ("pod", "node")
        for ip in svc["spec"]["clusterIPs"]
    ]
    add(
        Case(
            name,
            [
                svc,
                eslice(name, "v4", [ep("a1")], HTTP_EP),
                eslice(name, "v6", [ep("a1", family=6)], HTTP_EP, family=6),
            ],
            probes,
        )
    )
    name = "externalname"
    add(
        Case(
            name,
            [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"type": "ExternalName", "externalName": "example.com"},
                },
                eslice(name, "a", [ep("a1")], HTTP_EP),
            ],
            rules_mention=f"{NS}/{name}",
        )
    )
    name = "proxy-name-other"
    svc = service(name, HTTP, labels={"service.kubernetes.io/service-proxy-name": "other-proxy"})
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1")], HTTP_EP)],
            list(frontends(svc, ("pod",), ())),
            rules_mention=f"{NS}/{name}",
        )
    )

    # ---- IPv6 and dual-stack
    name = "ipv6-np"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP")],
        type="NodePort",
        families=(6,),
    )
    add(
        Case(
            name,
            [
                svc,
                eslice(
                    name,
                    "a",
                    [ep("a1", family=6), ep("b1", family=6)],
                    [sport(8080, "http"), sport(5353, "dns", "UDP")],
                    family=6,
                ),
            ],
            list(frontends(svc)),
        )
    )
    name = "dual-stack-lb"
    hc = next(_hc)
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        families=(4, 6),
        lb_ingress=[{"ip": next(_lb)}, {"ip": "fd00:198:19::1:10"}],
        externalTrafficPolicy="Local",
        healthCheckNodePort=hc,
    )
    add(
        Case(
            name,
            [
                svc,
                eslice(name, "v4", [ep("a1"), ep("b1")], HTTP_EP),
                eslice(name, "v6", [ep("a2", family=6), ep("b2", family=6)], HTTP_EP, family=6),
            ],
            list(frontends(svc, ("pod", "node"), ("pod", "node", "ext1"))),
            [HealthCheck(hc)],
        )
    )
    name = "ipv6-itp-local"
    svc = service(name, HTTP, families=(6,), internalTrafficPolicy="Local")
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a3", family=6), ep("b2", family=6)], HTTP_EP, family=6)],
            list(frontends(svc, ("pod",), ())),
        )
    )

    # ---- IPv6 and dual-stack source ranges (issue 19: an IPv6 /128 refused every transaction)
    def dual_slices(name: str, eps4: Sequence[str], eps6: Sequence[str]) -> list[Obj]:
        return [
            eslice(name, "v4", [ep(p) for p in eps4], HTTP_EP),
            eslice(name, "v6", [ep(p, family=6) for p in eps6], HTTP_EP, family=6),
        ]

    name = "lb-source-ranges-dual-stack"  # the Service: ext1 allowed, ext2 refused, both families
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        families=(4, 6),
        lb_ingress=[{"ip": next(_lb)}, {"ip": "fd00:198:19::1:11"}],
        loadBalancerSourceRanges=["198.18.0.100/32", "fd00:198:18::100/128"],
    )
    add(Case(name, [svc, *dual_slices(name, ["a1", "b1"], ["a2", "b2"])], list(frontends(svc))))
    name = "lb-source-ranges-ipv6"  # a wide IPv6 range (the pod network) and a /128 (ext2), no IPv4
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="LoadBalancer",
        families=(6,),
        lb_ingress=[{"ip": "fd00:198:19::1:12"}],
        loadBalancerSourceRanges=["fd00:10:244::/48", "fd00:198:18::101/128"],
    )
    add(
        Case(
            name,
            [
                svc,
                eslice(
                    name,
                    "a",
                    [ep("a1", family=6), ep("b1", family=6)],
                    [sport(8080, "http"), sport(5353, "dns", "UDP")],
                    family=6,
                ),
            ],
            list(frontends(svc)),
        )
    )
    name = "lb-source-ranges-dual-stack-etp-local"  # eTP Local: this node's endpoints, sources kept
    hc = next(_hc)
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        families=(6, 4),
        lb_ingress=[{"ip": "fd00:198:19::1:13"}, {"ip": next(_lb)}],
        loadBalancerSourceRanges=["fd00:198:18::101/128", "198.18.0.101/32", "10.244.0.0/16", "fd00:10:244::/48"],
        externalTrafficPolicy="Local",
        healthCheckNodePort=hc,
    )
    add(
        Case(
            name,
            [svc, *dual_slices(name, ["a2", "b1"], ["a3", "b2"])],
            list(frontends(svc)),
            [HealthCheck(hc)],
        )
    )
    name = "lb-source-ranges-dual-stack-ipv4-only"  # ranges of one family: the other family's LB IP?
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        families=(4, 6),
        lb_ingress=[{"ip": next(_lb)}, {"ip": "fd00:198:19::1:14"}],
        loadBalancerSourceRanges=["198.18.0.100/32"],
    )
    add(Case(name, [svc, *dual_slices(name, ["a1"], ["b2"])], list(frontends(svc))))
    cases += takeover_cases()
    cases += firewall_and_nodeport_rejects()
    cases += health_map_cases()
    cases += map_cases()  # the kube-proxy map's own cases (end of this file)
    cases += address_spelling_cases()
    cases += fuzzer_finds()
    for c in cases:
        for h in c.health:
            assert h.port  # every health check names a port
    return cases


def takeover_cases() -> list[Case]:
    """A frontend (address . proto . port) two Services claim. kube-proxy programs both, and the
    key goes to whichever Service it writes last in a sync (its map of Services is unordered), so
    the contested key itself is in differences.py (``takeover-*-contested``). nftproxy gives it to
    the Service's own ClusterIP (or NodePort), then to the older Service, then to the first by
    name; the loser keeps every other frontend, which must match kube-proxy (``takeover-*``)."""
    out = []
    # a tenant's externalIP names another Service's ClusterIP, on one of its ports (kube-dns's
    # 53/UDP): kube-dns keeps 53/UDP in nftproxy; its 53/TCP and 9153, the tenant's own ClusterIP
    # and NodePort answer in both
    dns = service("takeover-dns", [port(53, 5353, "dns", "UDP"), port(53, 8080, "dns-tcp"), port(9153, 9090, "m")])
    dns_ip = dns["spec"]["clusterIP"]
    tenant = service(
        "takeover-dns-tenant",
        [port(53, 5354, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        externalIPs=[dns_ip],
    )
    contested = [Probe(src, "udp", dns_ip, 53, "ClusterIP = tenant's externalIP") for src in ("pod", "node")]
    kept = [p for p in frontends(dns) if p.proto == "tcp"]
    kept += [p for p in frontends(tenant, ("pod", "node"), ("ext1", "node")) if p.what != "externalIP"]
    out.append(
        Case(
            "takeover-dns",
            [
                dns,
                eslice(
                    "takeover-dns",
                    "a",
                    [ep("a1")],
                    [sport(5353, "dns", "UDP"), sport(8080, "dns-tcp"), sport(9090, "m")],
                ),
                tenant,
                eslice("takeover-dns-tenant", "a", [ep("b1")], [sport(5354, "dns", "UDP")]),
            ],
            kept,
        )
    )
    out.append(Case("takeover-dns-contested", [], contested))
    # two Services with one externalIP and port: each keeps its ClusterIP and its other port there
    shared = next(_ext)
    one = service("takeover-ext-a", [port(80, 8080, "http"), port(81, 8081, "alt")], externalIPs=[shared])
    two = service("takeover-ext-b", [port(80, 8080, "http"), port(82, 9090, "other")], externalIPs=[shared])
    objects = [
        one,
        eslice("takeover-ext-a", "a", [ep("a2")], [sport(8080, "http"), sport(8081, "alt")]),
        two,
        eslice("takeover-ext-b", "a", [ep("b2")], [sport(8080, "http"), sport(9090, "other")]),
    ]
    mine = [p for svc in (one, two) for p in frontends(svc, ("pod", "node"), ("ext1", "pod", "node"))]
    out.append(Case("takeover-ext", objects, [p for p in mine if not (p.what == "externalIP" and p.port == 80)]))
    out.append(Case("takeover-ext-contested", [], [p for p in mine if p.what == "externalIP" and p.port == 80][:3]))
    return out


# --------------------------------------------------------------------------- UDP flows across changes


@dataclass
class FlowCase:
    """A UDP flow with a fixed source port to one frontend: one datagram before, one after."""

    name: str
    before: list[Obj]  # Service + slice, applied with the catalog
    after: list[Obj]  # applied while the flow is open
    source_port: int
    restart: bool = False  # the change is made while both proxies are stopped (full sync at start)
    frontend: str = "ClusterIP"  # ClusterIP (from the client pod) | externalIP | LB | NodePort (from ext1)
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (kind, name) deleted with ``after``

    @property
    def probe(self) -> Probe:
        svc = self.before[0]
        spec, p = svc["spec"], svc["spec"]["ports"][0]
        if self.frontend == "ClusterIP":
            return Probe("pod", "udp", spec["clusterIP"], p["port"], "ClusterIP")
        if self.frontend == "externalIP":
            return Probe("ext1", "udp", spec["externalIPs"][0], p["port"], "externalIP")
        if self.frontend == "LB":
            return Probe("ext1", "udp", svc["status"]["loadBalancer"]["ingress"][0]["ip"], p["port"], "LB")
        assert self.frontend == "NodePort"
        return Probe("ext1", "udp", NODE4, p["nodePort"], "NodePort")


def flow_cases() -> list[FlowCase]:
    dns_ep = [sport(5353, "dns", "UDP")]
    out: list[FlowCase] = []
    # (name, endpoints after, restart, frontend): one endpoint a1 before
    for i, (name, after, restart, frontend) in enumerate(
        (
            ("udp-endpoint-replaced", [ep("a2")], False, "ClusterIP"),
            (
                "udp-endpoint-terminating",
                [ep("a1", ready=False, serving=True, terminating=True), ep("a2")],
                False,
                "ClusterIP",
            ),
            (
                "udp-endpoint-terminating-alone",
                [ep("a1", ready=False, serving=True, terminating=True)],
                False,
                "ClusterIP",
            ),
            ("udp-endpoint-not-ready", [ep("a1", ready=False, serving=False), ep("a2")], False, "ClusterIP"),
            ("udp-last-endpoint-removed", [], False, "ClusterIP"),
            ("udp-endpoint-replaced-during-restart", [ep("a2")], True, "ClusterIP"),
            ("udp-unchanged-across-restart", [ep("a1")], True, "ClusterIP"),
            # v1.37 (kubernetes#139629): the last serving endpoint gone, flows to the ClusterIP,
            # externalIPs and LB IPs are flushed, a NodePort's are not (matched by port alone)
            ("udp-last-endpoint-removed-externalip", [], False, "externalIP"),
            ("udp-last-endpoint-removed-lb", [], False, "LB"),
            ("udp-last-endpoint-removed-nodeport", [], False, "NodePort"),
            ("udp-last-endpoint-not-ready", [ep("a1", ready=False, serving=False)], False, "ClusterIP"),
            ("udp-last-endpoint-removed-during-restart", [], True, "ClusterIP"),
        )
    ):
        if frontend == "ClusterIP":
            svc = service(name, [port(53, 5353, "dns", "UDP")])
        elif frontend == "externalIP":
            svc = service(name, [port(53, 5353, "dns", "UDP")], externalIPs=[next(_ext)])
        elif frontend == "LB":
            svc = service(
                name,
                [port(53, 5353, "dns", "UDP", node_port=next(_np))],
                type="LoadBalancer",
                lb_ingress=[{"ip": next(_lb)}],
            )
        else:
            svc = service(name, [port(53, 5353, "dns", "UDP", node_port=next(_np))], type="NodePort")
        out.append(
            FlowCase(
                name,
                [svc, eslice(name, "a", [ep("a1")], dns_ep)],
                [eslice(name, "a", after, dns_ep)],
                source_port=41000 + i,
                restart=restart,
                frontend=frontend,
            )
        )
    out += map_flow_cases()  # the kube-proxy map's own cases (end of this file)
    return out + firewall_flow_cases() + deleted_service_flows()


# --------------------------------------------------------------------------- changes to Services


@dataclass
class ChangeCase:
    """Objects created with the catalog, then changed (``after``: objects to apply, and
    ``deletes``: (kind, name) to delete) while both proxies run; ``probes`` are made after."""

    name: str
    before: list[Obj]
    after: list[Obj]
    deletes: list[tuple[str, str]]
    probes: list[Probe]
    sticky_before: bool = False  # session affinity before the change: compare backend counts


def change_cases() -> list[ChangeCase]:
    out: list[ChangeCase] = []

    def np_svc(name: str, **kw: Any) -> Obj:
        return service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort", **kw)

    def sl(name: str, eps: list[Obj]) -> Obj:
        return eslice(name, "a", eps, HTTP_EP)

    name = "chg-service-deleted"
    svc = np_svc(name)
    out.append(ChangeCase(name, [svc, sl(name, [ep("a1")])], [], [("service", name)], list(frontends(svc))))
    name = "chg-slice-deleted"
    svc = np_svc(name)
    out.append(
        ChangeCase(name, [svc, sl(name, [ep("a1")])], [], [("endpointslice", f"{name}-a")], list(frontends(svc)))
    )
    name = "chg-slice-emptied"
    svc = np_svc(name)
    out.append(ChangeCase(name, [svc, sl(name, [ep("a1"), ep("b1")])], [sl(name, [])], [], list(frontends(svc))))
    name = "chg-nodeport-renumbered"
    svc = np_svc(name)
    moved = json_copy(svc)
    moved["spec"]["ports"][0]["nodePort"] = next(_np)
    probes = list(frontends(svc, (), ("ext1", "node"))) + list(frontends(moved, (), ("ext1", "node")))
    out.append(ChangeCase(name, [svc, sl(name, [ep("a2")])], [moved], [], probes))
    name = "chg-nodeport-to-clusterip"
    svc = np_svc(name)
    plain = json_copy(svc)
    plain["spec"]["type"] = "ClusterIP"
    del plain["spec"]["ports"][0]["nodePort"]
    out.append(ChangeCase(name, [svc, sl(name, [ep("a2")])], [plain], [], list(frontends(svc))))
    name = "chg-etp-cluster-to-local"
    svc = np_svc(name)
    local = json_copy(svc)
    local["spec"]["externalTrafficPolicy"] = "Local"
    out.append(
        ChangeCase(name, [svc, sl(name, [ep("a3"), ep("b2")])], [local], [], list(frontends(local, (), ("ext1",))))
    )
    name = "chg-endpoint-moved-to-this-node"
    svc = service(name, HTTP, internalTrafficPolicy="Local")
    out.append(
        ChangeCase(
            name, [svc, sl(name, [ep("b1")])], [sl(name, [ep("a1"), ep("b1")])], [], list(frontends(svc, ("pod",), ()))
        )
    )
    # a ServiceCIDR created: nftproxy drops its unallocated addresses at once, kube-proxy at its
    # next full sync (hourly): differences.py
    name = "chg-service-cidr-added"
    cidr = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": "conformance-extra"},
        "spec": {"cidrs": [EXTRA_SERVICE_CIDR4]},
    }
    probes = [
        Probe(src, proto, "10.97.0.200", 80, "unallocated") for src in ("pod", "node") for proto in ("tcp", "udp")
    ]
    out.append(ChangeCase(name, [], [cidr], [], probes))
    name = "chg-affinity-turned-off"
    svc = np_svc(name, sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}})
    off = json_copy(svc)
    off["spec"]["sessionAffinity"] = "None"
    del off["spec"]["sessionAffinityConfig"]
    out.append(
        ChangeCase(
            name, [svc, sl(name, [ep("a1"), ep("a2")])], [off], [], list(frontends(off, ("pod",), ("ext1",))), True
        )
    )
    out += map_change_cases()  # the kube-proxy map's own cases (end of this file)
    return out + firewall_change_cases()


NODE4_NEW = "198.18.0.11"  # node-1's IPv4 after node_ip_change (an address added in both labs)


def node_ip_change() -> tuple[str, list[Obj], list[Probe]]:
    """Item 5: node-1's InternalIP changes (the Node patched). A NodePort Service, and the probes
    made to it on the old and the new address once both proxies have caught up."""
    name = "node-ip-changed"
    svc = service(name, [port(80, 8080, "http", node_port=next(_np))], type="NodePort")
    np = svc["spec"]["ports"][0]["nodePort"]
    probes = [Probe("ext1", "tcp", host, np, "NodePort") for host in (NODE4, NODE4_NEW, NODE6)]
    return name, [svc, eslice(name, "a", [ep("a1")], HTTP_EP)], probes


def json_copy(obj: Obj) -> Obj:
    import json  # noqa: PLC0415

    return dict(json.loads(json.dumps(obj)))


# --------------------------------------------------------------------------- UDP flows of a deleted Service


def deleted_service_flows() -> list[FlowCase]:
    """kube-proxy 1.38 (kubernetes#141371): a UDP Service deleted loses the open flows to its
    ClusterIP, externalIPs and LB IPs (not its NodePort's: matched by port number alone); 1.37 kept
    them, so a client went on reaching the Service's pods (differences.py). Deleted while both
    proxies are stopped, neither knows it was there: the flow stays with both."""
    dns_ep = [sport(5353, "dns", "UDP")]
    out: list[FlowCase] = []
    for i, (name, restart, frontend) in enumerate(
        (
            ("udp-service-deleted", False, "ClusterIP"),
            ("udp-service-deleted-externalip", False, "externalIP"),
            ("udp-service-deleted-nodeport", False, "NodePort"),
            ("udp-service-deleted-during-restart", True, "ClusterIP"),
        )
    ):
        if frontend == "NodePort":
            svc = service(name, [port(53, 5353, "dns", "UDP", node_port=next(_np))], type="NodePort")
        elif frontend == "externalIP":
            svc = service(name, [port(53, 5353, "dns", "UDP")], externalIPs=[next(_ext)])
        else:
            svc = service(name, [port(53, 5353, "dns", "UDP")])
        before = [svc, eslice(name, "a", [ep("a1")], dns_ep)]
        out.append(
            FlowCase(name, before, [], 41300 + i, restart=restart, frontend=frontend, deletes=[("service", name)])
        )
    return out


# ---- firewall and NodePort rejects (kube-proxy map)
# kube-proxy v1.37's nftables proxier (pkg/proxy/nftables/proxier.go): loadBalancerSourceRanges
# judge new connections only (`ct state new jump firewall-check`), also on a port without
# endpoints (another source is dropped, not refused); a range holding the node's IP lets the
# LoadBalancer IPs in as sources (allowFromNode: a node holding the VIP connects from it); a
# NodePort without endpoints is rejected in filter-input only, the node's own connections too
# (refused on the way in: ECONNREFUSED on a connected UDP socket, not EPERM from send()).
# An open TCP connection across a change has no probe here (each probe is a new connection):
# tests/netns/test_firewall_and_nodeport_rejects.py holds one; open UDP flows are FlowCases.

NODE_VIP4, NODE_VIP6 = "198.19.4.1", "fd00:198:19::4:1"  # held by node-1 (kube-vip), a range holds its IP
NODE_VIP4_UNLISTED, NODE_VIP6_UNLISTED = "198.19.4.2", "fd00:198:19::4:2"  # held by node-1, no range holds its IP
EXT1_RANGES = ["198.18.0.100/32", "fd00:198:18::100/128"]


def firewall_and_nodeport_rejects() -> list[Case]:
    out: list[Case] = []

    def lb(name: str, vips: Sequence[str], ranges: Sequence[str], eps: bool = True) -> Case:
        svc = service(
            name,
            [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
            type="LoadBalancer",
            families=(4, 6),
            lb_ingress=[{"ip": ip} for ip in vips],
            loadBalancerSourceRanges=list(ranges),
        )
        ports = [sport(8080, "http"), sport(5353, "dns", "UDP")]
        slices = [
            eslice(name, "v4", [ep("a1"), ep("b1")] if eps else [], ports),
            eslice(name, "v6", [ep("a2", family=6), ep("b2", family=6)] if eps else [], ports, family=6),
        ]
        return Case(name, [svc, *slices], list(frontends(svc)))

    # allowFromNode: node-1 holds the VIPs; a range holds its IP (both families), another ext1
    c = lb("fw-node-vip-range-holds-node-ip", [NODE_VIP4, NODE_VIP6], [f"{NODE4}/32", f"{NODE6}/128", *EXT1_RANGES])
    c.node_addresses = (NODE_VIP4, NODE_VIP6)
    out.append(c)
    c = lb("fw-node-vip-range-without-node-ip", [NODE_VIP4_UNLISTED, NODE_VIP6_UNLISTED], EXT1_RANGES)
    c.node_addresses = (NODE_VIP4_UNLISTED, NODE_VIP6_UNLISTED)
    out.append(c)
    # the range holds the node's IP, the node does not hold the VIP: it connects from its own IP
    out.append(lb("fw-range-holds-node-ip", [next(_lb), "fd00:198:19::4:3"], [f"{NODE4}/32", f"{NODE6}/128"]))
    # no endpoints: ext1 (listed) is refused, ext2 and the node (not listed) dropped
    out.append(lb("fw-source-ranges-no-endpoints", [next(_lb), "fd00:198:19::4:4"], EXT1_RANGES, eps=False))
    # the node's own NodePort without endpoints, TCP and UDP, both families (and every other source)
    name = "fw-nodeport-no-endpoints-from-node"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        families=(4, 6),
    )
    ports = [sport(8080, "http"), sport(5353, "dns", "UDP")]
    out.append(
        Case(name, [svc, eslice(name, "v4", [], ports), eslice(name, "v6", [], ports, family=6)], list(frontends(svc)))
    )
    name = "fw-nodeport-no-endpoints-etp-local-from-node"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="NodePort",
        externalTrafficPolicy="Local",
    )
    out.append(Case(name, [svc, eslice(name, "a", [], ports)], list(frontends(svc, ("node",), ("node", "ext1")))))
    return out


def firewall_flow_cases() -> list[FlowCase]:
    """An open UDP flow from ext1 to a LoadBalancer IP whose ranges stop holding ext1 (tightened,
    or added where there were none): its next datagram still gets through; new flows do not."""
    dns_ep = [sport(5353, "dns", "UDP")]
    out: list[FlowCase] = []
    for i, (name, before) in enumerate(
        (
            ("fw-udp-lb-source-ranges-tightened", ["198.18.0.100/32", "198.18.0.101/32"]),
            ("fw-udp-lb-source-ranges-added", None),
        )
    ):
        spec: dict[str, Any] = {"loadBalancerSourceRanges": before} if before else {}
        svc = service(
            name,
            [port(53, 5353, "dns", "UDP", node_port=next(_np))],
            type="LoadBalancer",
            lb_ingress=[{"ip": next(_lb)}],
            **spec,
        )
        after = json_copy(svc)
        after["spec"]["loadBalancerSourceRanges"] = ["198.18.0.101/32"]
        out.append(
            FlowCase(name, [svc, eslice(name, "a", [ep("a1")], dns_ep)], [after], source_port=41100 + i, frontend="LB")
        )
    return out


def firewall_change_cases() -> list[ChangeCase]:
    """Ranges tightened to exclude ext1 while both proxies run: new connections from it (TCP, UDP)
    are dropped, ext2 (still listed) gets in."""
    name = "fw-chg-lb-source-ranges-tightened"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))],
        type="LoadBalancer",
        lb_ingress=[{"ip": next(_lb)}],
        loadBalancerSourceRanges=["198.18.0.100/32", "198.18.0.101/32"],
    )
    after = json_copy(svc)
    after["spec"]["loadBalancerSourceRanges"] = ["198.18.0.101/32"]
    eps = eslice(name, "a", [ep("a1"), ep("b1")], [sport(8080, "http"), sport(5353, "dns", "UDP")])
    return [ChangeCase(name, [svc, eps], [after], [], list(frontends(svc, (), ("ext1", "ext2", "node"))))]


# ---- health checks (kube-proxy map)
# kube-proxy v1.37.2's health servers (pkg/proxy/healthcheck): a healthCheckNodePort answers any
# path and any method, with its local endpoint count in X-Load-Balancing-Endpoint-Weight and a
# tab-indented JSON body; /healthz and /livez (the healthz port, 10256) answer any method with a
# compact JSON, Go's 404 elsewhere. The rows compare the status, the headers below and the body
# (times masked) byte for byte. Not compared: Date, and Server (Go's net/http sends none, aiohttp
# names itself).
PROXY_HEALTH_PORT = 10256
HEALTH_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")


@dataclass(frozen=True)
class HealthRequest(HealthCheck):
    """A health check made with ``method`` to ``path``, compared in detail (headers, body)."""

    method: str = "GET"
    path: str = "/"


def health_map_cases() -> list[Case]:
    out: list[Case] = []

    def lb(name: str, endpoints: Sequence[Obj], families: Sequence[int] = (4,), v6: Sequence[Obj] = ()) -> Case:
        hc = next(_hc)
        svc = service(
            name,
            [port(80, 8080, "http", node_port=next(_np))],
            type="LoadBalancer",
            families=families,
            externalTrafficPolicy="Local",
            healthCheckNodePort=hc,
        )
        objects = [svc, eslice(name, "v4", endpoints, HTTP_EP)]
        if v6:
            objects.append(eslice(name, "v6", v6, HTTP_EP, family=6))
        return Case(name, objects)

    # 3 ready endpoints here (the weight), one terminating here and one elsewhere (not counted)
    c = lb("hc-map-weight", [ep("a1"), ep("a2"), ep("a3"), ep("c1", ready=False, terminating=True), ep("b1")])
    port_ = c.objects[0]["spec"]["healthCheckNodePort"]
    c.health += [HealthRequest(port_, method=m) for m in HEALTH_METHODS]
    c.health += [HealthRequest(port_, path=p) for p in ("/healthz", "/any/path?x=1")]
    out.append(c)
    # no ready endpoint here: 503, weight 0, whatever the method
    c = lb("hc-map-none", [ep("a1", ready=False, serving=False), ep("b1")])
    port_ = c.objects[0]["spec"]["healthCheckNodePort"]
    c.health += [HealthRequest(port_, method=m) for m in ("GET", "HEAD", "POST")]
    out.append(c)
    # dual-stack: each family's port answers with its own family's count
    c = lb("hc-map-dual-stack", [ep("a1"), ep("a2"), ep("b1")], families=(4, 6), v6=[ep("a3", family=6)])
    port_ = c.objects[0]["spec"]["healthCheckNodePort"]
    c.health += [HealthRequest(port_, host=h, method=m) for h in (NODE4, NODE6) for m in ("GET", "POST")]
    out.append(c)
    # the proxy's own /healthz and /livez, any method; other paths are Go's 404
    probes: list[HealthCheck] = [
        HealthRequest(PROXY_HEALTH_PORT, path=p, method=m) for p in ("/healthz", "/livez") for m in HEALTH_METHODS
    ]
    probes += [HealthRequest(PROXY_HEALTH_PORT, path=p) for p in ("/", "/healthz/", "/metrics", "/livez?verbose")]
    out.append(Case("hc-map-proxy-healthz", [], health=probes))
    return out


# ---- cases for the kube-proxy map
# Each case exercises, with packets, a rule or a branch of kube-proxy v1.37.2 that no case above
# reaches (docs/kube-proxy-map.md names the rule or branch of each).

UNALLOCATED4 = "10.96.250.2"  # in the ServiceCIDR, never a ClusterIP of these cases


def map_cases() -> list[Case]:
    out: list[Case] = []
    add = out.append
    http_dns = [port(80, 8080, "http"), port(53, 5353, "dns", "UDP")]
    http_dns_ep = [sport(8080, "http"), sport(5353, "dns", "UDP")]

    def np_http() -> list[Obj]:
        return [port(80, 8080, "http", node_port=next(_np))]

    def np_http_dns() -> list[Obj]:
        return [port(80, 8080, "http", node_port=next(_np)), port(53, 5353, "dns", "UDP", node_port=next(_np))]

    def lb(n: int = 1) -> list[Obj]:
        return [{"ip": next(_lb)} for _ in range(n)]

    # the services chain's "masquerade clusterIP traffic from outside cluster" (a router with a
    # static route for the Service range: ext2, harness.build_lab), and cluster-ips-check in
    # filter-forward: an unknown port of a ClusterIP rejected, an unallocated address dropped
    name = "cip-from-outside-cluster"
    svc = service(name, http_dns)
    cip = svc["spec"]["clusterIP"]
    probes = [Probe("ext2", "tcp", cip, 80, "ClusterIP"), Probe("ext2", "udp", cip, 53, "ClusterIP")]
    probes += [
        Probe("ext2", "tcp", cip, 81, "ClusterIP unknown port"),
        Probe("ext2", "udp", cip, 54, "ClusterIP unknown port"),
    ]
    probes += [Probe("ext2", "tcp", UNALLOCATED4, 80, "unallocated")]
    add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("b1")], http_dns_ep)], probes))

    # an externalIP that is the Service's own ClusterIP: kube-proxy writes both service-ips
    # elements on one key, the externalIP's (its EXT chain, masqueraded) last
    name = "extip-equals-own-clusterip"
    svc = service(name, HTTP)
    svc["spec"]["externalIPs"] = [svc["spec"]["clusterIP"]]
    add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("b1")], HTTP_EP)], list(frontends(svc, ("pod", "node"), ()))))

    # externalTrafficPolicy Local: an externalIP with no endpoint on this node (service-ips ->
    # the EXT chain's short-circuits; no-endpoint-services: drop)
    add(
        simple(
            "etp-local-extip-remote-only", [port(80, 8080, "http")], [ep("b1"), ep("b2")], HTTP_EP,
            externalIPs=[next(_ext)], externalTrafficPolicy="Local",
        )
    )  # fmt: skip
    # ... a dual-stack ClusterIP Service with an IPv4 externalIP only: the IPv6 side has no
    # external frontend (serviceport.go ExternallyAccessible per family)
    name = "etp-local-extip-one-family"
    svc = service(name, HTTP, families=(4, 6), externalIPs=[next(_ext)], externalTrafficPolicy="Local")
    slices = [
        eslice(name, "v4", [ep("a1"), ep("b1")], HTTP_EP),
        eslice(name, "v6", [ep("a2", family=6), ep("b2", family=6)], HTTP_EP, family=6),
    ]
    add(Case(name, [svc, *slices], list(frontends(svc, ("pod", "node"), ("ext1", "ext2")))))

    # internalTrafficPolicy Local with a NodePort under externalTrafficPolicy Cluster (the NodePort
    # uses every endpoint), and with both Local and no endpoint here
    add(
        simple("itp-local-np", np_http(), [ep("a1"), ep("b1")], HTTP_EP, type="NodePort", internalTrafficPolicy="Local")
    )
    add(
        simple(
            "itp-local-etp-local-np-remote-only", np_http(), [ep("b1")], HTTP_EP, type="NodePort",
            internalTrafficPolicy="Local", externalTrafficPolicy="Local",
        )
    )  # fmt: skip

    # no endpoints: every frontend of a LoadBalancer Service rejects (LB IP and externalIP too)
    name = "no-endpoints-lb-extip"
    svc = service(name, np_http(), type="LoadBalancer", lb_ingress=lb(), externalIPs=[next(_ext)])
    add(Case(name, [svc, eslice(name, "a", [], HTTP_EP)], list(frontends(svc))))

    # an externalIP that is the node's own address, without endpoints: rejected on input
    # (filter-input's jump to service-endpoints-check), before host-1's server on that port
    # would answer
    name = "extip-node-ip-no-endpoints"
    svc = service(name, [port(8091, 8080, "http")], externalIPs=[NODE4])
    add(Case(name, [svc, eslice(name, "a", [], HTTP_EP)], list(frontends(svc, ("pod", "node"), ("ext1", "ext2")))))

    # status.loadBalancer.ingress: an entry with a hostname only is not an address to program
    add(
        simple(
            "lb-hostname-ingress", np_http(), [ep("a1"), ep("b1")], HTTP_EP, type="LoadBalancer",
            lb_ingress=[{"hostname": "lb.example.com"}, *lb()],
        )
    )  # fmt: skip

    # loadBalancerSourceRanges: a /0 among them allows every source (serviceport.go IsZeroCIDR);
    # space-padded values (allowed by the API) are trimmed; the annotation is not read by the
    # proxy; an externalIP of a Service with source ranges is not filtered
    for name, ranges, extra in (
        ("lb-source-ranges-zero-cidr", ["0.0.0.0/0", "198.18.0.100/32"], {}),
        ("lb-source-ranges-whitespace", [" 198.18.0.100/32 "], {}),
        ("lb-source-ranges-annotation-ignored", None, {}),
        ("lb-source-ranges-externalip-not-filtered", ["198.18.0.100/32"], {"externalIPs": [next(_ext)]}),
    ):
        kw: dict[str, Any] = dict(extra)
        if ranges is None:
            kw["annotations"] = {"service.beta.kubernetes.io/load-balancer-source-ranges": "198.18.0.100/32"}
        else:
            kw["loadBalancerSourceRanges"] = ranges
        add(simple(name, np_http(), [ep("a1"), ep("b1")], HTTP_EP, type="LoadBalancer", lb_ingress=lb(), **kw))

    # EndpointSlices: a port without a number is ignored (endpointslicecache.go "Ignoring invalid
    # endpoint port"); a port of the same name but another protocol is another Service port; an
    # FQDN slice is not for a proxy (endpointschangetracker.go: address type)
    name = "slice-port-without-number"
    svc = service(name, HTTP)
    no_number = [{"name": "http", "protocol": "TCP"}]
    slices = [eslice(name, "a", [ep("a1")], no_number), eslice(name, "b", [ep("b1")], HTTP_EP)]
    add(Case(name, [svc, *slices], list(frontends(svc, ("pod",), ()))))
    name = "slice-port-protocol-mismatch"
    svc = service(name, [port(53, 5353, "dns", "UDP")])
    add(
        Case(
            name, [svc, eslice(name, "a", [ep("a1")], [sport(5353, "dns", "TCP")])], list(frontends(svc, ("pod",), ()))
        )
    )
    name = "slice-fqdn"
    svc = service(name, HTTP)
    fqdn = k.endpoint_slice(
        f"{name}-fqdn", name, [k.endpoint("a1.conf.example.com", node=NODE)], HTTP_EP, namespace=NS,
        address_type="FQDN", labels={"endpointslice.kubernetes.io/managed-by": "conformance"},
    )  # fmt: skip
    add(Case(name, [svc, fqdn, eslice(name, "b", [ep("b1")], HTTP_EP)], list(frontends(svc, ("pod",), ()))))

    # the service-proxy-name label with an empty value: kube-proxy's informer selects Services
    # WITHOUT the label, whatever its value
    name = "proxy-name-empty"
    svc = service(name, HTTP, labels={"service.kubernetes.io/service-proxy-name": ""})
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1")], HTTP_EP)],
            list(frontends(svc, ("pod",), ())),
            rules_mention=f"{NS}/{name}",
        )
    )

    # the same address twice in ONE slice, both ready: kube-proxy keeps the later copy
    # (endpointslicecache.go addEndpoints); here the later copy says another node, then this one
    for name, copies in (
        ("dup-in-one-slice-both-ready", [ep("a1"), ep("a1", node=OTHER)]),
        ("dup-in-one-slice-both-ready-local-last", [ep("a2", node=OTHER), ep("a2")]),
    ):
        svc = service(name, HTTP, internalTrafficPolicy="Local")
        add(Case(name, [svc, eslice(name, "a", copies, HTTP_EP)], list(frontends(svc, ("pod",), ()))))

    # healthCheckNodePort counts (endpointschangetracker.go LocalReadyEndpoints): distinct local
    # ready addresses of the Service, over every port of its slices
    name = "health-counts-pods-not-ports"
    hc = next(_hc)
    svc = service(
        name, [port(80, 8080, "http", node_port=next(_np)), port(9090, 9090, "metrics", node_port=next(_np))],
        type="LoadBalancer", lb_ingress=lb(), externalTrafficPolicy="Local", healthCheckNodePort=hc,
    )  # fmt: skip
    slices = [eslice(name, "a", [ep("a1"), ep("a2"), ep("b1")], [sport(8080, "http"), sport(9090, "metrics")])]
    add(Case(name, [svc, *slices], list(frontends(svc, ("pod",), ("ext1",))), [HealthCheck(hc)]))
    name = "health-counts-endpoints-of-other-ports"  # this node's endpoint is listed for no port of the Service
    hc = next(_hc)
    svc = service(
        name, np_http(), type="LoadBalancer", lb_ingress=lb(), externalTrafficPolicy="Local", healthCheckNodePort=hc
    )
    slices = [eslice(name, "a", [ep("b1")], HTTP_EP), eslice(name, "b", [ep("a1")], [sport(8081, "other")])]
    # the same with a local endpoint of its own port too (the differential fuzzer, seed 6): 2 for
    # kube-proxy, 1 here, both 200 with another weight
    more, hc2 = f"{name}-more", next(_hc)
    svc2 = service(
        more, np_http(), type="LoadBalancer", lb_ingress=lb(), externalTrafficPolicy="Local", healthCheckNodePort=hc2
    )
    slices += [eslice(more, "a", [ep("a1"), ep("b1")], HTTP_EP), eslice(more, "b", [ep("a2")], [sport(8081, "old")])]
    probes = [*frontends(svc, ("pod",), ("ext1",)), *frontends(svc2, ("pod",), ("ext1",))]
    add(Case(name, [svc, svc2, *slices], probes, [HealthCheck(hc), HealthCheck(hc2)]))

    # ClientIP affinity under externalTrafficPolicy Local (the local policy chain's affinity
    # rules); and across a Local-policy and a Cluster-policy frontend of one port
    name = "affinity-etp-local"
    svc = service(
        name, np_http_dns(), type="NodePort", externalTrafficPolicy="Local",
        sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )  # fmt: skip
    probes = [dataclasses.replace(p, sticky=True) for p in frontends(svc, ("pod", "node"), ("ext1", "ext2"))]
    add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("a2"), ep("b1")], http_dns_ep)], probes))
    # internalTrafficPolicy Local: the ClusterIP picks among this node's endpoints (a1 alone), the
    # NodePort (externalTrafficPolicy Cluster) among all four. kube-proxy's per-endpoint sets are
    # shared by both policy chains: after the ClusterIP, the NodePort finds the client in a1's
    # set. nftproxy's Cluster-policy record is its own (differences.py)
    name = "affinity-across-policies"
    svc = service(
        name, np_http_dns(), type="NodePort", internalTrafficPolicy="Local",
        sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )  # fmt: skip
    cip = svc["spec"]["clusterIP"]
    probes = [
        Probe(src, sp["protocol"].lower(), cip, sp["port"], "ClusterIP", True, (("NodePort", NODE4, sp["nodePort"]),))
        for src in ("pod", "node")
        for sp in svc["spec"]["ports"]
    ]
    eps = [ep("a1"), ep("b1"), ep("b2"), ep("c2")]
    # externalTrafficPolicy Local (the differential fuzzer, seed 1000): a pod or the node through
    # the ClusterIP, then the NodePort, short-circuited to the Cluster endpoints in both proxies
    etp = f"{name}-etp-local"
    svc2 = service(
        etp, np_http_dns(), type="NodePort", externalTrafficPolicy="Local",
        sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 300}},
    )  # fmt: skip
    cip2 = svc2["spec"]["clusterIP"]
    probes += [
        Probe(src, sp["protocol"].lower(), cip2, sp["port"], "ClusterIP", True, (("NodePort", NODE4, sp["nodePort"]),))
        for src in ("pod", "node")
        for sp in svc2["spec"]["ports"]
    ]
    eps5 = [ep(p) for p in ("a1", "a2", "a3", "b1", "b2")]
    add(Case(name, [svc, eslice(name, "a", eps, http_dns_ep), svc2, eslice(etp, "a", eps5, http_dns_ep)], probes))

    # localhost NodePorts: an endpoint that refuses (the node's own address, port 8080: nothing
    # listens there). kube-proxy's userspace proxy dials the one endpoint it picked and closes the
    # client when that fails; nftproxy's tries the next (differences.py)
    name = "localhost-nodeport-dead-endpoint"
    svc = service(name, np_http(), type="NodePort")
    # and one whose only endpoint refuses (no pod serves 7777; the differential fuzzer, seed 1008):
    # kube-proxy closes the client (an empty answer), nftproxy resets it
    none = f"{name}-none"
    svc2 = service(none, np_http(), type="NodePort")
    probes = [
        Probe("node", "tcp", "127.0.0.1", one["spec"]["ports"][0]["nodePort"], "NodePort localhost")
        for one in (svc, svc2)
    ]
    objects = [
        svc,
        eslice(name, "a", [ep("a1"), ep("host-1")], HTTP_EP),
        svc2,
        eslice(none, "a", [ep("a3")], [sport(7777, "http")]),
    ]
    add(Case(name, objects, probes))

    # the longest names the API allows (63-character Service name, 15-character port name): the
    # chain names and comments kube-proxy truncates
    name = "long-" + "n" * 58
    svc = service(name, [port(80, 8080, "http-port-named")])
    add(
        Case(
            name,
            [svc, eslice(name, "a", [ep("a1")], [sport(8080, "http-port-named")])],
            list(frontends(svc, ("pod",), ())),
        )
    )
    return out


def map_flow_cases() -> list[FlowCase]:
    """Open UDP flows (conntrack/cleanup.go) through frontends the cases above do not cover."""
    dns = [port(53, 5353, "dns", "UDP")]
    dns_ep = [sport(5353, "dns", "UDP")]
    terminating = [ep("a1", ready=False, serving=True, terminating=True), ep("a2")]
    flows: list[tuple[str, str, dict[str, Any], list[Obj]]] = [
        ("udp-endpoint-replaced-nodeport", "NodePort", {}, [ep("a2")]),
        ("udp-endpoint-replaced-externalip", "externalIP", {}, [ep("a2")]),
        ("udp-endpoint-replaced-lb", "LB", {}, [ep("a2")]),
        # the Local-policy side of the terminating-endpoint rule (differences.py
        # udp-endpoint-terminating is the Cluster side)
        ("udp-endpoint-terminating-itp-local", "ClusterIP", {"internalTrafficPolicy": "Local"}, terminating),
    ]
    out: list[FlowCase] = []
    for i, (name, frontend, extra, after) in enumerate(flows):
        if frontend == "NodePort":
            svc = service(name, [port(53, 5353, "dns", "UDP", node_port=next(_np))], type="NodePort", **extra)
        elif frontend == "externalIP":
            svc = service(name, dns, externalIPs=[next(_ext)], **extra)
        elif frontend == "LB":
            ports = [port(53, 5353, "dns", "UDP", node_port=next(_np))]
            svc = service(name, ports, type="LoadBalancer", lb_ingress=[{"ip": next(_lb)}], **extra)
        else:
            svc = service(name, dns, **extra)
        before = [svc, eslice(name, "a", [ep("a1")], dns_ep)]
        after_slice = [eslice(name, "a", after, dns_ep)]
        out.append(FlowCase(name, before, after_slice, source_port=41100 + i, frontend=frontend))
    return out


def map_change_cases() -> list[ChangeCase]:
    """Changes made while both proxies run (servicechangetracker.go, endpointslicecache.go)."""
    out: list[ChangeCase] = []
    name = "chg-port-removed"  # ServicePortMap.merge/filter/unmerge: the port left rejects
    svc = service(name, [port(80, 8080, "http"), port(9090, 9090, "metrics")])
    one = json_copy(svc)
    one["spec"]["ports"] = one["spec"]["ports"][:1]
    both_ep = [sport(8080, "http"), sport(9090, "metrics")]
    out.append(
        ChangeCase(name, [svc, eslice(name, "a", [ep("a1")], both_ep)], [one], [], list(frontends(svc, ("pod",), ())))
    )
    name = "chg-endpoint-moved-between-slices"  # seen in two slices, then in one
    svc = service(name, HTTP)
    before = [svc, eslice(name, "a", [ep("a1")], HTTP_EP), eslice(name, "b", [ep("b1")], HTTP_EP)]
    after = [eslice(name, "a", [], HTTP_EP), eslice(name, "b", [ep("a1"), ep("b1")], HTTP_EP)]
    out.append(ChangeCase(name, before, after, [], list(frontends(svc, ("pod",), ()))))
    name = "chg-lb-ip-changed"  # status.loadBalancer.ingress replaced
    svc = service(
        name, [port(80, 8080, "http", node_port=next(_np))], type="LoadBalancer", lb_ingress=[{"ip": next(_lb)}]
    )
    moved = json_copy(svc)
    moved["status"]["loadBalancer"]["ingress"] = [{"ip": next(_lb)}]
    probes = [p for p in frontends(svc, (), ("ext1",)) if p.what == "LB"]
    probes += [p for p in frontends(moved, (), ("ext1",)) if p.what == "LB"]
    out.append(ChangeCase(name, [svc, eslice(name, "a", [ep("a1")], HTTP_EP)], [moved], [], probes))
    return out


def node_zone_change() -> tuple[str, list[Obj], list[Probe]]:
    """node-1's zone label changes (kube-proxy's OnTopologyChange: a full sync with the new zone)
    and back: a Service with zone hints for both zones, probed in each."""
    name = "node-zone-changed"
    svc = service(name, HTTP)
    eps = [ep("a1", zones=[ZONE]), ep("b1", zones=[OTHER_ZONE]), ep("b2", zones=[OTHER_ZONE])]
    return name, [svc, eslice(name, "a", eps, HTTP_EP)], list(frontends(svc, ("pod",), ()))


# ---- address spellings and ServiceCIDRs (kube-proxy map)
# The spellings an apiserver before 1.36 stores (StrictIPCIDRValidation off: the suite's control
# plane runs with it off, tests/conformance/conftest.py), kube-proxy reads with ParseIPSloppy /
# ParseCIDRSloppy: leading zeros (decimal), IPv4-mapped IPv6 (IPv4), host bits, padding.


def _zeros(ipv4: str) -> str:
    """An IPv4 address with leading zeros in every octet ("010.096.010.020": decimal 10.96.10.20)."""
    return ".".join(f"{int(o):03d}" for o in ipv4.split("."))


def _respelled(svc: Obj, cluster_ip: str) -> Obj:
    svc["spec"]["clusterIP"], svc["spec"]["clusterIPs"] = cluster_ip, [cluster_ip]
    return svc


def address_spelling_cases() -> list[Case]:
    cases: list[Case] = []
    add = cases.append

    def probes(
        what: str, hosts: Sequence[str], sources: Sequence[str] = ("pod", "node", "ext1", "ext2")
    ) -> list[Probe]:
        return [Probe(src, "tcp", host, 80, what) for host in hosts for src in sources]

    # externalIPs
    ips = [next(_ext), next(_ext)]
    name = "addr-extip-legacy-spellings"
    svc = service(name, HTTP, externalIPs=[_zeros(ips[0]), f"::ffff:{ips[1]}"])
    add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("b1")], HTTP_EP)], probes("externalIP", ips)))
    # LoadBalancer ingress IPs
    ips = [next(_lb), next(_lb)]
    name = "addr-lb-ip-legacy-spellings"
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        lb_ingress=[{"ip": _zeros(ips[0])}, {"ip": f"::ffff:{ips[1]}"}],
    )
    add(Case(name, [svc, eslice(name, "a", [ep("a2"), ep("b2")], HTTP_EP)], probes("LB", ips)))
    # loadBalancerSourceRanges: each admits one of ext1 (198.18.0.100) and ext2 (.101), or both
    for name, ranges in (
        ("addr-source-range-leading-zeros", ["198.018.000.100/032"]),
        ("addr-source-range-ipv4-mapped", ["::ffff:198.18.0.101/128"]),  # IPv4 to kube-proxy
        ("addr-source-range-host-bits", ["198.18.0.101/31"]),  # 198.18.0.100/31: both
        ("addr-source-range-padded", [" 198.18.0.101/32 "]),  # trimmed (even strict validation allows it)
    ):
        ip = next(_lb)
        svc = service(
            name,
            [port(80, 8080, "http", node_port=next(_np))],
            type="LoadBalancer",
            lb_ingress=[{"ip": ip}],
            loadBalancerSourceRanges=ranges,
        )
        add(Case(name, [svc, eslice(name, "a", [ep("a1"), ep("b1")], HTTP_EP)], probes("LB", [ip])))
    # ClusterIPs as the apiserver stores them when given so (the allocator takes them)
    for name, spell in (("addr-cluster-ip-leading-zeros", _zeros), ("addr-cluster-ip-ipv4-mapped", "::ffff:{}".format)):
        svc = service(name, HTTP)
        ip = svc["spec"]["clusterIP"]
        _respelled(svc, spell(ip))
        add(
            Case(
                name,
                [svc, eslice(name, "a", [ep("a3"), ep("b2")], HTTP_EP)],
                probes("ClusterIP", [ip], ("pod", "node")),
            )
        )
    # EndpointSlice addresses (IPv4 slices: the IPv6 ones were validated strictly)
    name = "addr-endpoint-legacy-spellings"
    svc = service(name, HTTP)
    eps = [ep("a1"), ep("b1")]
    eps[0]["addresses"] = [_zeros(PODS["a1"][1])]
    eps[1]["addresses"] = [f"::ffff:{PODS['b1'][1]}"]
    add(
        Case(
            name,
            [svc, eslice(name, "a", eps, HTTP_EP)],
            probes("ClusterIP", svc["spec"]["clusterIPs"], ("pod", "node")),
        )
    )
    for case in cases:
        case.legacy = case.name != "addr-source-range-padded"  # trimmed: even strict validation allows it
    # A ServiceCIDR of one narrow CIDR and one too wide (2000::/12): the narrow one's unallocated
    # addresses are dropped by both; kube-proxy drops the wide one's too, nftproxy leaves that
    # CIDR out and reports it (differences.py: service-cidr-too-wide).
    name = "addr-service-cidr-narrow-beside-wide"
    cidr = k.service_cidr("conformance-two-widths", *TWO_WIDTHS_SERVICE_CIDR)
    unallocated = [
        Probe(src, proto, "10.98.0.200", 80, "unallocated") for src in ("pod", "node") for proto in ("tcp", "udp")
    ]
    add(Case(name, [cidr], unallocated))
    wide = [
        Probe(src, proto, "2000::c8", 80, "in a too wide ServiceCIDR")
        for src in ("pod", "node")
        for proto in ("tcp", "udp")
    ]
    add(Case("service-cidr-too-wide", [], wide))
    return cases


# ---- fuzzer finds (kept seeds)
# Differences the differential fuzzer (tests/conformance/worlds.py) found and nftproxy now follows
# kube-proxy in, each as the smallest world that shows it, named after the seed that found it.
# Finds that are intentional differences are part of their differences.py entry's case (seeds 6,
# 1000, 1008).


def fuzzer_finds() -> list[Case]:
    out: list[Case] = []
    # seed 109: one slice lists pods twice, both copies ready, under externalTrafficPolicy Local
    # with a health check (dup-in-one-slice-* show it under internalTrafficPolicy Local).
    # kube-proxy walks the slice in order and a copy replaces an earlier one unless it is
    # terminating (endpointslicecache.go addEndpoints): a2's later copy is on node-2 (not local:
    # not counted, no eTP Local traffic), a3's later copy on this node.
    name = "fuzzer-seed-109-dup-in-one-slice"
    hc = next(_hc)
    svc = service(
        name,
        [port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        lb_ingress=[{"ip": next(_lb)}],
        externalTrafficPolicy="Local",
        healthCheckNodePort=hc,
    )
    eps = [ep("a2"), ep("a2", node=OTHER), ep("a3", node=OTHER), ep("a3"), ep("b1")]
    out.append(
        Case(name, [svc, eslice(name, "a", eps, HTTP_EP)], list(frontends(svc, ("pod",), ("ext1",))), [HealthCheck(hc)])
    )
    # seed 159: loadBalancerSourceRanges on a port without endpoints, IPv4 only (as
    # fw-source-ranges-no-endpoints, dual-stack). kube-proxy programs the firewall whatever the
    # endpoints (nftables/proxier.go): a source outside the ranges is dropped (timeout), one
    # inside is refused.
    name = "fuzzer-seed-159-source-ranges-without-endpoints"
    svc = service(
        name,
        [port(53, 5353, "dns", "UDP", node_port=next(_np)), port(80, 8080, "http", node_port=next(_np))],
        type="LoadBalancer",
        lb_ingress=[{"ip": next(_lb)}],
        loadBalancerSourceRanges=["198.18.0.100/32"],
    )
    probes = [p for p in frontends(svc, ("pod",), ("ext1", "ext2", "pod")) if p.what == "LB"]
    out.append(Case(name, [svc, eslice(name, "a", [], [sport(5353, "dns", "UDP"), sport(8080, "http")])], probes))
    return out
