"""Random worlds for the differential suite: Services and EndpointSlices from a seed, and the
connections (probes) derived from the objects the apiserver stored.

A world is a handful of Services with their EndpointSlices, made from ``random.Random(seed)``
alone (the seed reproduces it): Service types (ClusterIP, NodePort, LoadBalancer with status
ingress IPs, ExternalName, headless), ports (numbers, names, TCP/UDP, named and numeric
targetPorts, one port number with both protocols, one NodePort number for both), IP families
(IPv4, IPv6, both, either order), externalIPs, traffic policies, ClientIP affinity and its
timeout, loadBalancerSourceRanges (several shapes, and the annotation), ipMode, topology
(trafficDistribution, the topology-mode annotation, zone and node hints), the
service-proxy-name and headless labels; EndpointSlices per family (none to several), their
ports (matching the Service's, mismatched names, left out, without a number), endpoints on the
lab's real pods and host servers (their real ports, so connections succeed) on node-1, node-2
or no node, every ready/serving/terminating condition, duplicates within and across slices;
IPv4 ClusterIPs, externalIPs, LoadBalancer IPs, endpoint addresses and source ranges now and
then in a legacy spelling (leading zeros, IPv4-mapped IPv6: the suite's apiserver runs with
StrictIPCIDRValidation off); now and then two Services claiming one frontend.

Only what kube-proxy resolves the same way every time: of two copies of one endpoint in two
slices, kube-proxy keeps the one it meets last in a Go map walk, so copies that would give a
different endpoint in another order are made identical (``_unambiguous``). A ClientIP-affinity
Service's endpoints all answer alike: a sticky client sees one endpoint, chosen at random, so an
endpoint that refuses, a host-network one, the client pods themselves (hairpin: masqueraded) or
one whose slice names the wrong node (eTP Local: the reply bypasses node-1) would make the two
labs' outcomes a coin toss.

Probes (``probes``), each address as kube-proxy reads it (``ip``): every frontend (each
ClusterIP, NodePort on the node's addresses and on localhost, LoadBalancer IP, externalIP) and
protocol, from sources drawn among those that reach it (harness.build_lab); ports and protocols
the Service lacks; unallocated ServiceCIDR addresses; each healthCheckNodePort
(``health_checks``). Rows where nftproxy differs on purpose are tagged with their entry of
differences.py: a frontend two Services claim (``takeover-*-contested``: kube-proxy gives that
key to whichever Service it writes last), a localhost NodePort with an endpoint that refuses, a
sticky client through a Local- and a Cluster-policy frontend, a health check whose count
kube-proxy takes from ports the Service lacks (accepted only with the counts it predicts).

    python -m tests.conformance.worlds show SEED        # the world of SEED, as YAML
    python -m tests.conformance.worlds run --worlds N [--seed S] [--batch-minutes M]

``run`` (``make fuzz-differential``) runs the differential test of worlds
(tests/conformance/test_differential.py::test_fuzzed_worlds_answer_as_kube_proxy) in batches of
at most M minutes, each batch a pytest of its own under the heavy lock (released between
batches), and prints the totals.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nftproxy.model.sloppy import parse_ip_sloppy
from testkit.k8s import objects as k
from tests.conformance import cases as c

Obj = dict[str, Any]
NS = "fuzz"
SENTINEL = "fuzz-sentinel"  # a Service whose slice each world flips: a change both proxies see
SENTINEL_IP = "10.96.99.1"
WORLD_LABEL = "fuzz.nftproxy.io/seed"
MAX_PROBES = 40  # per world (negative probes come on top)

# Addresses of their own (the catalog's Services use 10.96.10.x, 198.19.1.x, 198.19.2.x,
# NodePorts from 30100 and health ports from 32100)
NODE_PORTS = range(31000, 32000)
UNALLOCATED4 = "10.96.240.{}"
UNALLOCATED6 = "fd00:10:96::f0{:02x}"
ZONES = (c.ZONE, c.OTHER_ZONE, "zone-c")
PORT_NAMES = ("http", "dns", "metrics", "grpc", "a", "p-1", "x9", "web")
TARGET_NAMES = ("http", "dns", "web", "metrics")
PORT_NUMBERS = (53, 80, 443, 8080, 9090, 5353, 1, 65535, 8090)
SOURCE_RANGES: tuple[tuple[str, ...], ...] = (
    ("198.18.0.100/32",),  # ext1 only
    ("198.18.0.101/32", "10.244.0.0/16"),  # ext2 and the pods
    ("198.18.0.0/24",),  # the node network
    ("0.0.0.0/0",),  # everyone: as no ranges
    ("10.244.1.0/24",),  # node-1's pods
    ("198.18.0.1/32",),  # the node itself
    ("fd00:198:18::100/128",),
    ("fd00:198:18::101/128", "198.18.0.100/32"),  # both families
    ("::/0", "198.18.0.101/32"),
    ("fd00:10:244::/48", "fd00:198:18::/64"),
    ("198.18.0.100/24",),  # host bits set (legacy spelling)
    (" 198.18.0.101/32 ",),  # whitespace (kube-proxy trims it)
    ("198.018.000.100/32",),  # leading zeros (legacy spelling)
    ("::ffff:198.18.0.101/128",),  # IPv4-mapped: an IPv4 range to kube-proxy
)
STICKY_AVOID = ("c1", "c2")  # the client pods: not endpoints of an affinity Service
# differences.py entries the probes of some frontends are tagged with (see probes)
LOCALHOST_REFUSED = "localhost-nodeport-dead-endpoint"
AFFINITY_LOCAL = "affinity-across-policies"
HEALTH_OTHER_PORTS = "health-counts-endpoints-of-other-ports"
SOURCE_RANGES_ANNOTATION = "service.beta.kubernetes.io/load-balancer-source-ranges"


# --------------------------------------------------------------------------- the world


@dataclass
class World:
    seed: int
    objects: list[Obj]  # in creation order: a Service, then its EndpointSlices
    features: set[str] = field(default_factory=set)  # what it exercises (coverage)

    def yaml(self, objects: Sequence[Obj] | None = None) -> str:
        return yaml.safe_dump_all(self.objects if objects is None else objects, sort_keys=False)


class _Pool:
    """Distinct values drawn reproducibly from ``values`` (a sequence, or a count and a function
    of the index: the address pools are not built)."""

    def __init__(self, rng: random.Random, values: Sequence[Any], make: Callable[[int], Any] | None = None) -> None:
        self.rng, self.used = rng, set[int]()
        self.count = len(values) if make is None else int(values[0])
        self.make = make or values.__getitem__

    def take(self) -> Any:
        while True:
            i = self.rng.randrange(self.count)
            if i not in self.used:
                self.used.add(i)
                return self.make(i)


def _chance(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _pick(rng: random.Random, weights: dict[Any, float]) -> Any:
    return rng.choices(list(weights), list(weights.values()))[0]


def ip(text: str) -> str:
    """An address as kube-proxy reads it (ParseIPSloppy: leading zeros are decimal, an
    IPv4-mapped IPv6 address is IPv4), in its canonical spelling."""
    got = parse_ip_sloppy(text)
    assert got is not None, text  # the apiserver stored it
    return str(got)


def is_v6(text: str) -> bool:
    return ":" in ip(text)


def legacy(address: str, rng: random.Random) -> str:
    """An IPv4 address in a spelling the apiserver takes with StrictIPCIDRValidation off and
    kube-proxy reads as the same address: leading zeros, or IPv4-mapped IPv6."""
    if rng.random() < 0.5:
        return ".".join(f"{int(o):03d}" for o in address.split("."))
    return f"::ffff:{address}"


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.seed = seed
        self.features: set[str] = set()
        self.cip4 = _Pool(rng, [100 * 254], lambda i: f"10.96.{100 + i // 254}.{1 + i % 254}")
        self.cip6 = _Pool(rng, [4096], lambda i: f"fd00:10:96::{0xC000 + i:x}")
        self.lb4 = _Pool(rng, [254], lambda i: f"198.19.3.{i + 1}")
        self.lb6 = _Pool(rng, [254], lambda i: f"fd00:198:19::3:{i + 1:x}")
        self.ext4 = _Pool(rng, [254], lambda i: f"198.19.4.{i + 1}")
        self.ext6 = _Pool(rng, [254], lambda i: f"fd00:198:19::4:{i + 1:x}")
        self.node_ports = _Pool(rng, NODE_PORTS)
        self.names = _Pool(rng, ["web", "dns", "api", "db", "zz", "a", "metrics", "edge", "cache", "q"])

    def note(self, *what: str) -> None:
        self.features.update(what)

    def spelled(self, address: str, what: str, p: float = 0.1) -> str:
        """Now and then an IPv4 address in a legacy spelling (noted as ``spelling:<what>``)."""
        if ":" in address or not _chance(self.rng, p):
            return address
        self.note(f"spelling:{what}")
        return legacy(address, self.rng)

    # ---- Services

    def service(self, i: int) -> Obj:
        rng, note = self.rng, self.note
        name = f"{self.names.take()}-{i}"
        kind = _pick(rng, {"ClusterIP": 30, "NodePort": 25, "LoadBalancer": 30, "ExternalName": 4, "headless": 8})
        note(f"type:{kind}")
        if kind == "ExternalName":
            spec: Obj = {"type": "ExternalName", "externalName": "example.com"}
            if _chance(rng, 0.5):
                spec["ports"] = self.ports(1)
            svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": spec}
            return self._labels(svc)
        families = _pick(rng, {(4,): 45, (6,): 20, (4, 6): 25, (6, 4): 10})
        note(f"families:{families}")
        n = _pick(rng, {1: 50, 2: 30, 3: 15, 4: 5})
        ports = self.ports(n)
        spec = {
            "ipFamilies": ["IPv4" if f == 4 else "IPv6" for f in families],
            "ipFamilyPolicy": "SingleStack"
            if len(families) == 1
            else rng.choice(["RequireDualStack", "PreferDualStack"]),
        }
        if kind == "headless":
            ips = ["None"]
            kind = "ClusterIP"
        else:
            ips = [self.spelled(self.cip4.take(), "clusterIP", 0.05) if f == 4 else self.cip6.take() for f in families]
        external = kind in ("NodePort", "LoadBalancer")
        ext_ips: list[str] = []
        if _chance(rng, 0.2):
            for _ in range(rng.randint(1, 2)):
                fam = rng.choice(families) if _chance(rng, 0.85) else rng.choice((4, 6))
                ext_ips.append(self.spelled(self.ext4.take(), "externalIP") if fam == 4 else self.ext6.take())
            if _chance(rng, 0.1) and 4 in families:
                ext_ips.append(c.NODE4)  # the node's own address
                note("externalIP:node")
            note("externalIPs")
            external = True
        if external and _chance(rng, 0.4):
            spec["externalTrafficPolicy"] = "Local"
            note("eTP:Local")
        if _chance(rng, 0.2):
            spec["internalTrafficPolicy"] = "Local"
            note("iTP:Local")
        if _chance(rng, 0.2):
            spec["sessionAffinity"] = "ClientIP"
            timeout = rng.choice([30, 60, 300, 10800, 86400, None])
            if timeout is not None:
                spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": timeout}}
            note("affinity")
        annotations: Obj = {}
        lb_ingress: list[Obj] = []
        if kind == "LoadBalancer" or _chance(rng, 0.03):
            for _ in range(rng.choice([0, 1, 1, 1, 2])):
                fam = rng.choice(families)
                ing: Obj = {"ip": self.spelled(self.lb4.take(), "lb-ip") if fam == 4 else self.lb6.take()}
                mode = _pick(rng, {None: 70, "VIP": 15, "Proxy": 15})
                if mode:
                    ing["ipMode"] = mode
                    note(f"ipMode:{mode}")
                lb_ingress.append(ing)
            if _chance(rng, 0.05):
                lb_ingress.append({"hostname": "lb.example.com"})
            note("lb-ingress" if kind == "LoadBalancer" else "lb-ingress-on-non-lb")
        if kind == "LoadBalancer":
            if _chance(rng, 0.15):
                spec["allocateLoadBalancerNodePorts"] = False
                note("no-lb-nodeports")
            if _chance(rng, 0.35):
                ranges = list(rng.choice(SOURCE_RANGES))
                note("source-ranges")
                if _chance(rng, 0.15):
                    annotations[SOURCE_RANGES_ANNOTATION] = ",".join(r.strip() for r in ranges)
                    note("source-ranges:annotation")
                else:
                    spec["loadBalancerSourceRanges"] = ranges
            if spec.get("externalTrafficPolicy") == "Local":
                spec["healthCheckNodePort"] = self.node_ports.take()
            if _chance(rng, 0.05):
                spec["loadBalancerClass"] = "example.com/other"
                note("loadBalancerClass")
        elif _chance(rng, 0.02):
            spec["loadBalancerSourceRanges"] = ["198.18.0.100/32"]  # not a LoadBalancer: refused?
        if kind in ("NodePort", "LoadBalancer") and spec.get("allocateLoadBalancerNodePorts", True):
            self.node_port_numbers(ports)
        if _chance(rng, 0.25):
            spec["trafficDistribution"] = rng.choice(["PreferClose", "PreferSameZone", "PreferSameNode"])
            note(f"trafficDistribution:{spec['trafficDistribution']}")
        if _chance(rng, 0.08):
            annotations["service.kubernetes.io/topology-mode"] = rng.choice(["Auto", "auto", "Disabled"])
            note("topology-mode")
        svc = k.service(
            name,
            ips,
            ports,
            namespace=NS,
            type=kind,
            external_ips=ext_ips,
            lb_ingress=lb_ingress,
            annotations=annotations or None,
            **spec,
        )
        return self._labels(svc)

    def _labels(self, svc: Obj) -> Obj:
        rng = self.rng
        labels = svc["metadata"].setdefault("labels", {})
        labels[WORLD_LABEL] = str(self.seed)
        if _chance(rng, 0.04):
            labels["service.kubernetes.io/service-proxy-name"] = rng.choice(["other-proxy", ""])
            self.note("service-proxy-name")
        if _chance(rng, 0.04):
            labels["service.kubernetes.io/headless"] = ""
            self.note("headless-label:service")
        return svc

    def ports(self, n: int) -> list[Obj]:
        rng = self.rng
        out: list[Obj] = []
        used: set[tuple[int, str]] = set()
        names = _Pool(rng, PORT_NAMES)
        for j in range(n):
            proto = "TCP" if _chance(rng, 0.6) else "UDP"
            if j and _chance(rng, 0.25):  # the same port with the other protocol
                prev = out[-1]
                number, proto = prev["port"], "UDP" if prev["protocol"] == "TCP" else "TCP"
                self.note("port:both-protocols")
            else:
                number = rng.choice(PORT_NUMBERS) if _chance(rng, 0.7) else rng.randint(2, 29999)
            if (number, proto) in used:
                continue
            used.add((number, proto))
            name = "" if n == 1 and _chance(rng, 0.5) else names.take()
            served = c.POD_TCP if proto == "TCP" else c.POD_UDP
            target: int | str = _pick(rng, {rng.choice(served): 50, number: 20, rng.choice(TARGET_NAMES): 30})
            if isinstance(target, str):
                self.note("targetPort:named")
            p = k.port(number, name, proto, target=target)
            if not name:
                del p["name"]
            out.append(p)
        self.note(*(f"proto:{p['protocol']}" for p in out))
        return out

    def node_port_numbers(self, ports: list[Obj]) -> None:
        by_number: dict[int, int] = {}
        for p in ports:
            twin = by_number.get(p["port"])
            if twin is not None and _chance(self.rng, 0.5):  # one NodePort number for TCP and UDP
                p["nodePort"] = twin
                self.note("nodePort:both-protocols")
            else:
                p["nodePort"] = self.node_ports.take()
            by_number[p["port"]] = p["nodePort"]

    # ---- EndpointSlices

    def slices(self, svc: Obj) -> list[Obj]:
        rng, note = self.rng, self.note
        name = svc["metadata"]["name"]
        spec = svc["spec"]
        families = [4 if f == "IPv4" else 6 for f in spec.get("ipFamilies", ["IPv4"])]
        if _chance(rng, 0.05):
            families.append(6 if families[0] == 4 else 4)  # a slice of a family the Service lacks
            note("slice:other-family")
        sticky = spec.get("sessionAffinity") == "ClientIP"
        topo = "trafficDistribution" in spec or svc["metadata"].get("annotations")
        out: list[Obj] = []
        for fam in families:
            for _ in range(_pick(rng, {0: 10, 1: 60, 2: 22, 3: 8})):
                out.append(self.slice(svc, f"{name}-{len(out)}", fam, sticky=sticky, topo=bool(topo)))
        if len(out) > 1:
            note("slices:several")
        if out and _chance(rng, 0.2):
            self.duplicate(out, sticky)
        self._unambiguous(out)
        return out

    def slice(self, svc: Obj, slice_name: str, fam: int, *, sticky: bool, topo: bool) -> Obj:
        rng, note = self.rng, self.note
        host = not sticky and _chance(rng, 0.08)  # host-network endpoints (8090/TCP, 5390/UDP)
        ports: list[Obj] = []
        for sp in svc["spec"].get("ports", []):
            if _chance(rng, 0.12):
                note("slice-port:missing")
                continue
            proto = sp["protocol"]
            if host:
                number = c.HOST_TCP[0] if proto == "TCP" else c.HOST_UDP[0]
            elif not sticky and _chance(rng, 0.05):
                number = 7777  # no pod serves it
                note("slice-port:unserved")
            else:
                number = rng.choice(c.POD_TCP if proto == "TCP" else c.POD_UDP)
            pname = sp.get("name", "")
            if _chance(rng, 0.06):
                pname = "other" if pname != "other" else "x"
                note("slice-port:name-mismatch")
            if any(p.get("name", "") == pname for p in ports):
                continue
            p = k.port(number, pname, proto)
            if not pname and _chance(rng, 0.5):
                del p["name"]  # the apiserver defaults it to ""
            if _chance(rng, 0.02):
                del p["port"]  # no number: kube-proxy ignores the port
                note("slice-port:no-number")
            ports.append(p)
        no_ports = _chance(rng, 0.03)
        if no_ports:
            note("slice:no-ports")
        pool = ["host-1", "host-2"] if host else [p for p in c.PODS if not (sticky and p in STICKY_AVOID)]
        count = _pick(rng, {0: 8, 1: 30, 2: 30, 3: 20, 4: 12})
        endpoints = [self.endpoint(p, fam, topo, sticky) for p in rng.sample(pool, min(count, len(pool)))]
        if host:
            note("endpoint:host-network")
        labels: Obj = {"endpointslice.kubernetes.io/managed-by": "fuzz", WORLD_LABEL: str(self.seed)}
        service_name: str | None = svc["metadata"]["name"]
        roll = rng.random()
        if roll < 0.03:
            service_name = None
            note("slice:no-service-label")
        elif roll < 0.06:
            labels["service.kubernetes.io/headless"] = ""
            note("headless-label:slice")
        elif roll < 0.08:
            labels["service.kubernetes.io/service-proxy-name"] = "other-proxy"
            note("service-proxy-name:slice")
        return k.endpoint_slice(
            slice_name,
            service_name,
            endpoints,
            None if no_ports else ports,
            namespace=NS,
            address_type="IPv4" if fam == 4 else "IPv6",
            labels=labels,
        )

    def endpoint(self, pod: str, fam: int, topo: bool, sticky: bool) -> Obj:
        rng, note = self.rng, self.note
        where, v4, v6 = c.PODS.get(pod) or c.HOSTS[pod]
        conds: list[bool | None]
        if _chance(rng, 0.65):
            conds = [True, True, False]
        else:
            conds = [rng.choice([True, False, None]) for _ in range(3)]
            note("conditions:" + "".join("U" if v is None else "TF"[not v] for v in conds))
        node_roll = rng.random()
        node: str | None = where
        if node_roll < 0.08 and not sticky:
            node = c.OTHER if where == c.NODE else c.NODE
            note("endpoint:wrong-node")
        elif node_roll < 0.18:
            node = None
            note("endpoint:no-node")
        zones = nodes = None
        if _chance(rng, 0.7 if topo else 0.1):
            zones = rng.sample(ZONES, rng.randint(1, 2))
            note("hints:zones")
            if _chance(rng, 0.4):
                nodes = rng.sample((c.NODE, c.OTHER), rng.randint(1, 2))
                note("hints:nodes")
        e = k.endpoint(
            v4 if fam == 4 else v6,
            ready=conds[0],
            serving=conds[1],
            terminating=conds[2],
            node=node,
            zone=rng.choice(ZONES) if _chance(rng, 0.2) else None,
            for_zones=zones,
            for_nodes=nodes,
        )
        if conds[1] is None:
            e["conditions"].pop("serving", None)
        e["addresses"][0] = self.spelled(e["addresses"][0], "endpoint", 0.05)
        if _chance(rng, 0.03):  # a second address (only the first one counts)
            other = rng.choice([p for p in c.PODS if p != pod])
            e["addresses"].append(c.PODS[other][1 if fam == 4 else 2])
            note("endpoint:two-addresses")
        return e

    def duplicate(self, slices: list[Obj], sticky: bool) -> None:
        """A copy of one endpoint in the same slice or another of its family, with other
        conditions or node (the apiserver takes both)."""
        rng = self.rng
        src = rng.choice(slices)
        if not src["endpoints"]:
            return
        e = json.loads(json.dumps(rng.choice(src["endpoints"])))
        e["conditions"] = {key: rng.choice([True, False]) for key in ("ready", "serving", "terminating")}
        if _chance(rng, 0.5) and not sticky:
            e["nodeName"] = rng.choice((c.NODE, c.OTHER))
        same_family = [s for s in slices if s["addressType"] == src["addressType"]]
        dst = rng.choice(same_family)
        dst["endpoints"].insert(rng.randint(0, len(dst["endpoints"])), e)
        self.note("duplicate:same-slice" if dst is src else "duplicate:across-slices")

    def _unambiguous(self, slices: list[Obj]) -> None:
        """Copies of one address that kube-proxy would resolve differently depending on the
        order it walks the slices in (endpointslicecache.go addEndpoints: a copy replaces an
        earlier one unless it is terminating) are made equal to the first slice's copy."""
        while True:
            fixed = False
            for fam in ("IPv4", "IPv6"):
                group = [s for s in slices if s["addressType"] == fam]
                addrs = {ip(e["addresses"][0]) for s in group for e in s["endpoints"]}
                for addr in sorted(addrs):
                    holders = [s for s in group if any(ip(e["addresses"][0]) == addr for e in s["endpoints"])]
                    if len(holders) < 2 or len({_winner(order, addr) for order in itertools.permutations(holders)}) < 2:
                        continue
                    first = _winner(holders[:1], addr)
                    assert first is not None
                    for s in holders[1:]:
                        s["endpoints"] = [
                            json.loads(first) if ip(e["addresses"][0]) == addr else e for e in s["endpoints"]
                        ]
                    fixed = True
            if not fixed:
                return

    # ---- two Services, one frontend

    def takeover(self, services: list[Obj]) -> None:
        rng = self.rng
        live = [
            s
            for s in services
            if s["spec"].get("type") != "ExternalName" and s["spec"].get("clusterIP") != "None" and s["spec"]["ports"]
        ]
        if len(live) < 2:
            return
        a, b = rng.sample(live, 2)
        pa, pb = a["spec"]["ports"][0], b["spec"]["ports"][0]
        if any(p is not pb and (p["port"], p["protocol"]) == (pa["port"], pa["protocol"]) for p in b["spec"]["ports"]):
            return
        pb["port"], pb["protocol"] = pa["port"], pa["protocol"]
        fam = a["spec"]["ipFamilies"][0]
        if fam not in b["spec"]["ipFamilies"]:
            return
        how = rng.choice(["clusterIP", "externalIP", "lb"])
        if how == "clusterIP":
            addr = next(a_ip for a_ip in a["spec"]["clusterIPs"] if is_v6(a_ip) == (fam == "IPv6"))
        elif a["spec"].get("externalIPs"):
            addr = a["spec"]["externalIPs"][0]
        else:
            addr = self.ext4.take() if fam == "IPv4" else self.ext6.take()
            a["spec"]["externalIPs"] = [addr]
        if how == "lb" and b["spec"]["type"] == "LoadBalancer":
            b.setdefault("status", {"loadBalancer": {"ingress": []}})["loadBalancer"]["ingress"].append({"ip": addr})
        else:
            b["spec"].setdefault("externalIPs", []).append(addr)
        self.note(f"takeover:{how}")


def _winner(order: Iterable[Obj], addr: str) -> str | None:
    """kube-proxy's copy of ``addr`` walking the slices in ``order`` (JSON, for comparing)."""
    got: Obj | None = None
    for s in order:
        for e in s["endpoints"]:
            if ip(e["addresses"][0]) == addr and (got is None or not e["conditions"].get("terminating", False)):
                got = e
    return None if got is None else json.dumps(got, sort_keys=True)


def generate(seed: int) -> World:
    g = _Gen(seed)
    services = [g.service(i) for i in range(_pick(g.rng, {1: 15, 2: 30, 3: 30, 4: 20, 5: 5}))]
    if _chance(g.rng, 0.08):
        g.takeover(services)
    objects: list[Obj] = []
    for svc in services:
        objects.append(svc)
        objects += g.slices(svc)
    if _chance(g.rng, 0.05):  # a slice whose Service does not exist
        objects.append(g.slice(services[0] | {"metadata": {"name": "gone"}}, "gone-0", 4, sticky=False, topo=False))
        g.note("slice:orphan")
    return World(seed, objects, g.features)


# --------------------------------------------------------------------------- probes


@dataclass(frozen=True)
class Tagged:
    case: str  # the row's case: the world's, or the differences.py entry of a contested frontend
    probe: c.Probe


def proxied(svc: Obj) -> bool:
    """Whether a proxy programs the Service at all (pkg/proxy/util ShouldSkipService, and the
    informer's label selector)."""
    spec, labels = svc["spec"], svc["metadata"].get("labels") or {}
    return (
        spec.get("type") != "ExternalName"
        and spec.get("clusterIP") not in (None, "", "None")
        and "service.kubernetes.io/service-proxy-name" not in labels
    )


def claims(svc: Obj) -> dict[tuple[str, str, int], str]:
    """The frontends (ip, proto, port) the Service claims in kube-proxy, each with its kind
    (ClusterIP, externalIP, LB): its ClusterIPs, the externalIPs and VIP-mode LoadBalancer IPs
    of its families (pkg/proxy/serviceport.go)."""
    if not proxied(svc):
        return {}
    spec = svc["spec"]
    fams = set(spec.get("ipFamilies", []))
    ips: list[tuple[str, str]] = [(ip(a), "ClusterIP") for a in spec.get("clusterIPs", [])]
    ips += [(ip(a), "externalIP") for a in spec.get("externalIPs", [])]
    ips += [
        (ip(i["ip"]), "LB")
        for i in (svc.get("status") or {}).get("loadBalancer", {}).get("ingress", [])
        if i.get("ip") and i.get("ipMode", "VIP") == "VIP"
    ]
    return {
        (a, p["protocol"].lower(), p["port"]): what
        for a, what in ips
        if ("IPv6" if ":" in a else "IPv4") in fams
        for p in spec.get("ports", [])
    }


def contested(services: Sequence[Obj]) -> dict[tuple[str, str, int], str]:
    """Frontends two Services claim -> their differences.py entry."""
    by_key: dict[tuple[str, str, int], list[str]] = {}
    for svc in services:
        for key, what in claims(svc).items():
            by_key.setdefault(key, []).append(what)
    return {
        key: "takeover-dns-contested" if "ClusterIP" in kinds else "takeover-ext-contested"
        for key, kinds in by_key.items()
        if len(kinds) > 1
    }


def _frontends(svc: Obj) -> list[tuple[str, str, int, str, tuple[str, ...]]]:
    """(proto, host, port, what, sources) of every frontend of every port of the Service, each
    address as kube-proxy reads it."""
    spec = svc["spec"]
    fams = spec.get("ipFamilies", [])
    lb = [ip(i["ip"]) for i in (svc.get("status") or {}).get("loadBalancer", {}).get("ingress", []) if i.get("ip")]
    cips = [ip(a) for a in spec.get("clusterIPs", []) if a != "None"]
    out: list[tuple[str, str, int, str, tuple[str, ...]]] = []
    for p in spec.get("ports", []):
        proto = p["protocol"].lower()
        for a in cips:
            out.append((proto, a, p["port"], "ClusterIP", ("pod", "node")))
        if p.get("nodePort"):
            for f in fams:
                host = c.NODE4 if f == "IPv4" else c.NODE6
                out.append((proto, host, p["nodePort"], "NodePort", c.SOURCES))
                out.append(
                    (proto, "127.0.0.1" if f == "IPv4" else "::1", p["nodePort"], "NodePort localhost", ("node",))
                )
        for a in lb:
            out.append((proto, a, p["port"], "LB", ("pod", "node", "ext1", "ext2")))
        for a in spec.get("externalIPs", []):
            out.append((proto, ip(a), p["port"], "externalIP", ("pod", "node", "ext1", "ext2")))
    return out


def refusing_families(svc: Obj, slices: Sequence[Obj]) -> set[str]:
    """The address types of the Service's slices that put an endpoint on a TCP port it does
    not serve (a pod on 7777, a host server off 8090): its localhost NodePort then meets an
    endpoint that refuses, where nftproxy tries the next one (differences.py LOCALHOST_REFUSED)."""
    out = set()
    hosts = {a for _, v4, v6 in c.HOSTS.values() for a in (v4, v6)}
    for s in slices:
        if (s["metadata"].get("labels") or {}).get(k.SERVICE_NAME) != svc["metadata"]["name"]:
            continue
        for p in s.get("ports") or []:
            if p.get("protocol", "TCP") != "TCP" or "port" not in p:
                continue
            for e in s.get("endpoints") or []:  # the apiserver stores none as null
                if p["port"] not in (c.HOST_TCP if ip(e["addresses"][0]) in hosts else c.POD_TCP):
                    out.add(s["addressType"])
    return out


def probes(seed: int, services: Sequence[Obj], slices: Sequence[Obj] = ()) -> list[Tagged]:
    """The probes of a world, from the Services and slices as the apiserver stored them."""
    rng = random.Random(f"probes-{seed}")
    case = f"fuzz-{seed}"
    taken = contested(services)
    found: list[Tagged] = []
    negative: list[Tagged] = []
    for svc in services:
        spec = svc["spec"]
        sticky = spec.get("sessionAffinity") == "ClientIP"
        refusing = refusing_families(svc, slices)
        ranges = bool(spec.get("loadBalancerSourceRanges")) or SOURCE_RANGES_ANNOTATION in (
            svc["metadata"].get("annotations") or {}
        )
        fronts = _frontends(svc)
        for proto, host, port, what, sources in fronts:
            if what == "NodePort localhost" and not _chance(rng, 0.3):
                continue
            if sticky and spec.get("externalTrafficPolicy") == "Local":
                # pod2 (on node-2) is short-circuited to every endpoint, its source kept: an
                # endpoint on node-2 answers it directly, past node-1 (a timeout), and a sticky
                # client's one random pick decides every try (seeds 5000, 5064)
                sources = tuple(s for s in sources if s != "pod2")
            if what == "LB" and ranges:
                picked = ["ext1", "ext2", rng.choice(["pod", "node"])]  # inside and outside the ranges
            else:
                picked = rng.sample(sources, min(len(sources), 2))
            for src in picked:
                tag = taken.get((host, proto, port), case)
                if what == "NodePort localhost" and proto == "tcp" and ("IPv6" if ":" in host else "IPv4") in refusing:
                    tag = LOCALHOST_REFUSED
                found.append(Tagged(tag, c.Probe(src, proto, host, port, what, sticky=sticky)))
        if sticky and len(fronts) > 1 and _chance(rng, 0.4):  # one client through several frontends
            # ... of one Service port (each port, and each family, has an affinity of its own)
            first = _frontends({**svc, "spec": {**spec, "ports": spec["ports"][:1]}})
            proto, host, port, what, _ = first[0]
            hops = tuple(
                (w, h, n)
                for pr, h, n, w, _ in first[1:]
                if (":" in h) == (":" in host)
                and w in ("NodePort", "externalIP", "ClusterIP")
                and (h, pr, n) not in taken
            )
            if hops and (host, proto, port) not in taken:
                local = "Local" in (spec.get("externalTrafficPolicy"), spec.get("internalTrafficPolicy"))
                found.append(
                    Tagged(AFFINITY_LOCAL if local else case, c.Probe("pod", proto, host, port, what, True, hops[:3]))
                )
        cips = [ip(a) for a in spec.get("clusterIPs", []) if a != "None"]
        if cips and _chance(rng, 0.5):  # a port, or a protocol, the Service lacks
            have = {(p["port"], p["protocol"].lower()) for p in spec.get("ports", [])}
            port = rng.choice(
                [p for p in (80, 53, 81, 8080, 9999) if (p, "tcp") not in have and (p, "udp") not in have]
            )
            proto = rng.choice(["tcp", "udp"])
            negative.append(
                Tagged(
                    case, c.Probe(rng.choice(["pod", "node"]), proto, rng.choice(cips), port, "ClusterIP unknown port")
                )
            )
            other = [
                (n, "udp" if pr == "tcp" else "tcp")
                for n, pr in have
                if (n, "udp" if pr == "tcp" else "tcp") not in have
            ]
            if other:
                n, pr = rng.choice(other)
                addr = rng.choice(cips)
                negative.append(
                    Tagged(taken.get((addr, pr, n), case), c.Probe("pod", pr, addr, n, "ClusterIP unknown proto"))
                )
    if len(found) > MAX_PROBES:
        found = rng.sample(found, MAX_PROBES)
    unalloc = rng.choice([UNALLOCATED4.format(rng.randint(1, 254)), UNALLOCATED6.format(rng.randint(1, 254))])
    negative.append(
        Tagged(case, c.Probe(rng.choice(["pod", "node"]), rng.choice(["tcp", "udp"]), unalloc, 80, "unallocated"))
    )
    return found + negative


@dataclass(frozen=True)
class HealthProbe:
    """A healthCheckNodePort asked on the node's address of one family. Where kube-proxy's count
    (this node's ready endpoints of every port of the Service's slices) differs from the count of
    the Service's own ports, the row is tagged with HEALTH_OTHER_PORTS, accepted only when both
    proxies answer those counts (``explained``)."""

    check: c.HealthCheck
    case: str
    kube_proxy: int  # the local ready endpoints kube-proxy counts
    own_ports: int  # those of the Service's own ports

    def explained(self, kube_proxy: str, nftproxy: str) -> bool:
        return f"localEndpoints={self.kube_proxy} " in kube_proxy and f"localEndpoints={self.own_ports} " in nftproxy


def _local_ready(slices: Sequence[Obj], only: set[tuple[str, str]] | None) -> int:
    """This node's distinct ready endpoint addresses over the slices' ports (``only`` those
    (name, protocol)), each port's copies resolved as endpointslicecache.go addEndpoints: keyed
    by address and port, a later copy replaces an earlier one unless it is terminating."""
    by_port: dict[tuple[str, str], dict[str, Obj]] = {}
    for s in slices:
        for p in s.get("ports") or []:
            key = (p.get("name") or "", p.get("protocol", "TCP"))
            if not p.get("port") or (only is not None and key not in only):
                continue
            copies = by_port.setdefault(key, {})
            for e in s.get("endpoints") or []:
                at = f"{ip(e['addresses'][0])}:{p['port']}"
                if at not in copies or not e["conditions"].get("terminating", False):
                    copies[at] = e
    return len(
        {
            ip(e["addresses"][0])
            for copies in by_port.values()
            for e in copies.values()
            if e["conditions"].get("ready", True) is not False and e.get("nodeName") == c.NODE
        }
    )


def _watched(svc: Obj, s: Obj, family: str) -> bool:
    """Whether kube-proxy's proxier of ``family`` takes slice ``s`` as one of the Service's (its
    slice informer leaves out the headless label only: cmd/kube-proxy/app/server.go; the
    service-proxy-name label filters Services)."""
    labels = s["metadata"].get("labels") or {}
    return (
        labels.get(k.SERVICE_NAME) == svc["metadata"]["name"]
        and s["addressType"] == family
        and "service.kubernetes.io/headless" not in labels
    )


def health_checks(seed: int, services: Sequence[Obj], slices: Sequence[Obj] = ()) -> list[HealthProbe]:
    """The healthCheckNodePorts of the world's eTP Local LoadBalancers, on the node's address of
    each family of the Service (kube-proxy serves each family's count there)."""
    out = []
    for svc in services:
        spec = svc["spec"]
        if not proxied(svc) or not spec.get("healthCheckNodePort"):
            continue
        own = {(p.get("name") or "", p["protocol"]) for p in spec.get("ports", [])}
        for f in spec.get("ipFamilies", []):
            mine = [s for s in slices if _watched(svc, s, f)]
            every, counted = _local_ready(mine, None), _local_ready(mine, own)
            check = c.HealthCheck(spec["healthCheckNodePort"], f == "IPv6", c.NODE4 if f == "IPv4" else c.NODE6)
            out.append(HealthProbe(check, HEALTH_OTHER_PORTS if every != counted else f"fuzz-{seed}", every, counted))
    return out


# --------------------------------------------------------------------------- the long run


@dataclass
class Totals:
    worlds: int = 0
    objects: int = 0
    refused: int = 0
    probes: int = 0
    matches: int = 0
    accepted: int = 0
    unexplained: int = 0
    failing_seeds: list[int] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)  # reason -> count
    diffs: list[list[str]] = field(default_factory=list)  # [seed, case, path, kube-proxy, nftproxy]
    next_seed: int = 0

    def add(self, other: Totals) -> None:
        for name in ("worlds", "objects", "refused", "probes", "matches", "accepted", "unexplained"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failing_seeds += other.failing_seeds
        self.diffs += other.diffs
        for r, n in other.refusals.items():
            self.refusals[r] = self.refusals.get(r, 0) + n
        self.next_seed = other.next_seed

    def line(self) -> str:
        return (
            f"{self.worlds} worlds, {self.objects} objects ({self.refused} refused by the apiserver), "
            f"{self.probes} probes compared: {self.matches} match, {self.accepted} accepted differences, "
            f"{self.unexplained} unexplained differences"
        )

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, indent=1))

    @classmethod
    def load(cls, path: Path) -> Totals:
        return cls(**json.loads(path.read_text()))


ROOT = Path(__file__).resolve().parents[2]
LOCK = "/tmp/nftproxy-heavy.lock"


def run(worlds: int, seed: int, batch_minutes: float, lock: str, logs: Path) -> int:
    """``worlds`` worlds from ``seed`` on, in pytest runs of at most ``batch_minutes`` each, every
    one under ``lock`` (flock), released between them. Prints the totals; each batch's pytest
    output (the table of every row, the failing worlds as YAML) and the totals go to ``logs``."""
    total = Totals(next_seed=seed)
    started = time.monotonic()
    batch = idle = 0
    logs.mkdir(parents=True, exist_ok=True)
    while total.worlds < worlds:
        batch += 1
        with tempfile.TemporaryDirectory(prefix="fuzz-differential-") as tmp:
            out = Path(tmp) / "totals.json"
            log = logs / f"batch-{total.next_seed}.log"
            env = dict(
                os.environ,
                NFTPROXY_FUZZ_SEED=str(total.next_seed),
                NFTPROXY_FUZZ_WORLDS=str(worlds - total.worlds),
                NFTPROXY_FUZZ_MINUTES=str(batch_minutes),
                NFTPROXY_FUZZ_OUT=str(out),
                NFTPROXY_CONFORMANCE_ONLY="^fuzz$",  # the worlds only, not the catalog
            )
            test = "tests/conformance/test_differential.py::test_fuzzed_worlds_answer_as_kube_proxy"
            argv = ["flock", lock, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
            print(f"batch {batch}: seeds from {total.next_seed}", flush=True)
            with log.open("w") as f:
                rc = subprocess.run(argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, check=False).returncode
            if not out.exists():
                print(f"batch {batch}: pytest exited {rc} without totals ({log}); stopping", flush=True)
                break
            got = Totals.load(out)
        total.add(got)
        print(f"batch {batch} (exit {rc}, {log}): {got.line()}", flush=True)
        print(f"so far: {total.line()}", flush=True)
        idle = idle + 1 if got.worlds == 0 else 0
        if idle == 3:  # a world that crashes is skipped by the next batch; three batches in a row: stop
            print("three batches without a world; stopping", flush=True)
            break
    minutes = (time.monotonic() - started) / 60
    total.dump(logs / f"totals-{seed}.json")
    print(f"\nfuzz-differential: seeds {seed}..{total.next_seed - 1}, {minutes:.0f} min")
    print(total.line())
    for reason, n in sorted(total.refusals.items(), key=lambda kv: -kv[1]):
        print(f"  refused {n}x: {reason}")
    for d in total.diffs:
        print(f"  DIFF seed {d[0]}: {d[1]} | {d[2]} | kube-proxy: {d[3]} | nftproxy: {d[4]}")
    if total.failing_seeds:
        print(f"failing seeds (replay: NFTPROXY_FUZZ_SEED=S NFTPROXY_FUZZ_WORLDS=1): {total.failing_seeds}")
    return 1 if total.unexplained or total.worlds < worlds else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.conformance.worlds")
    sub = p.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the world of a seed as YAML (and what it exercises)")
    show.add_argument("seed", type=int)
    r = sub.add_parser("run", help="the long differential run (needs root; takes the heavy lock per batch)")
    r.add_argument("--worlds", type=int, default=200)
    r.add_argument("--seed", type=int, default=None, help="the first world's seed (default: the time)")
    r.add_argument("--batch-minutes", type=float, default=10.0)
    r.add_argument("--lock", default=LOCK)
    r.add_argument("--logs", type=Path, default=ROOT / "_output" / "fuzz-differential")
    args = p.parse_args(argv)
    if args.cmd == "show":
        w = generate(args.seed)
        print(w.yaml())
        print("# exercises: " + ", ".join(sorted(w.features)))
        return 0
    seed = args.seed if args.seed is not None else int(time.time())
    return run(args.worlds, seed, args.batch_minutes, args.lock, args.logs)


if __name__ == "__main__":
    sys.exit(main())
