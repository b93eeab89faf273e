"""Hypothesis strategies for raw API objects (dicts as the API serves them), valid and invalid.

Names and addresses come from small pools most of the time, so Services meet their
EndpointSlices, IPs collide and duplicates happen; every field is sometimes missing, of the wrong
type, at an edge, unicode, empty or huge.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from typing import Any

from hypothesis import strategies as st

Obj = dict[str, Any]

LONG = "x" * 63
NAMES = ["a", "b", "web", "db", "wéb-ü", "日本", LONG, "a-b-c-d"]
NAMESPACES = ["default", "ns1", "kube-system", LONG[:40], "ñs"]
NODES = ["n1", "n2", "n3"]
SVC4 = ["10.96.0.1", "10.96.0.2", "10.96.0.3", "10.96.0.4", "10.96.1.1", "10.96.255.254"]
SVC6 = ["fd00:10:96::1", "fd00:10:96::2", "fd00:10:96::ffff", "FD00:10:96:0::3"]
EXT4 = ["198.19.0.1", "198.19.0.2", "203.0.113.7"]
EXT6 = ["fd00:198:19::1", "fd00:198:19::2"]
EP4 = [f"10.244.{n}.{h}" for n in (1, 2) for h in (2, 3, 4, 5)]
EP6 = [f"fd00:10:244:{n}::{h}" for n in (1, 2) for h in (2, 3, 4)]
BAD_IPS = ["", "None", "300.1.1.1", "::g", "10.96.0", "1.2.3.4/32", " 10.96.0.9 ", "localhost", "fe80::1%eth0",
           "0x0a.96.0.1", "1fd00::1", "::ffff:1.2.3", "10.96.0.1\u00a0"]  # fmt: skip
CIDRS = ["10.0.0.0/8", "192.168.1.0/24", "0.0.0.0/0", "198.18.0.5/32", "fd00::/8", "::/0", "2001:db8::1/128"]
BAD_CIDRS = [
    "10.0.0.0/33",
    "nope",
    "",
    "1.2.3.4/-1",
    "10.0.0.1",
    "10.0.0.0/255.0.0.0",
    "\x1c10.0.0.0/8",
    "::ffff:1.2.3.4/129",
]
# The shapes of real address input (issue 19: an IPv6 /128 rendered as '…::100/' refused every
# transaction, and the fuzzers never met one in a Service the compiler got as far as its ranges).
HOST_CIDRS = ["198.18.0.100/32", "fd00:198:18::100/128", "0.0.0.0/32", "::/128", "255.255.255.255/32"]
ZERO_CIDRS = ["0.0.0.0/0", "::/0"]
MAPPED_CIDRS = ["::ffff:198.18.0.0/120", "::ffff:198.18.0.100/128", "::ffff:0:0/96", "::ffff:10.0.0.0/104"]
HOST_BITS_CIDRS = ["10.0.0.1/8", "198.18.0.101/24", "fd00:198:18::100/48", "fd00:10:244:1::5/64", "::1/0"]
OTHER_CIDRS = ["fd00:10:244::/48", "10.244.0.0/16", "2001:db8::/127", "198.18.0.0/31", "FD00:198:18:0::/64"]
SHAPED_CIDRS = HOST_CIDRS + ZERO_CIDRS + MAPPED_CIDRS + HOST_BITS_CIDRS + OTHER_CIDRS
MAPPED_IPS = ["::ffff:198.19.0.1", "::ffff:198.19.1.7", "::ffff:203.0.113.7"]  # IPv4-mapped IPv6
LONG_FORM_IPS = ["fd00:198:19:0:0:0:0:1", "FD00:198:19::2", "fd00:0198:0019::3"]  # one address, other texts


# The legacy spellings an apiserver before 1.36 stores (kube-proxy reads them: model/sloppy.py)
LEGACY_IPS = ["198.019.000.001", "010.096.000.001", "::ffff:198.19.0.2", "::ffff:c613:3", "0fd00:198:19::1"]
LEGACY_CIDRS = ["010.000.000.000/08", "198.018.000.100/032", "::ffff:198.18.0.0/120", " 198.18.0.0/24 ",
                "\u00a0fd00:198:18::/64\u2003", "0fd00::/8"]  # fmt: skip
_GO_SPACES = ["", " ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\x85"]


@st.composite
def respelled_ip(draw: Any, addr: IPv4Address | IPv6Address) -> str:
    """Another text of ``addr`` that kube-proxy (ParseIPSloppy) reads as ``addr``: leading zeros
    (decimal octets, hex groups of up to six digits), IPv4-mapped IPv6 (dotted or hex), case."""

    def pad(digits: str) -> str:
        zeros: int = draw(st.integers(0, 2))
        return "0" * zeros + digits

    if isinstance(addr, IPv4Address):
        dotted = ".".join(pad(o) for o in str(addr).split("."))
        hi, lo = int(addr) >> 16, int(addr) & 0xFFFF
        forms = [dotted, f"::ffff:{dotted}", f"0:0:0:0:0:ffff:{dotted}", f"::{pad('ffff')}:{pad(f'{hi:x}')}:{lo:X}"]
        return str(draw(st.sampled_from(forms)))
    groups = [pad(g.lstrip("0") or "0") for g in addr.exploded.split(":")]
    text = ":".join(groups)
    return text.upper() if draw(st.booleans()) else text


@st.composite
def respelled_cidr(draw: Any, net: IPv4Network | IPv6Network, padded: bool = False) -> str:
    """Another text of ``net`` that kube-proxy (ParseCIDRSloppy; a source range trimmed first:
    ``padded``) reads as ``net``: host bits set, a respelled address, a length with leading zeros,
    IPv4-mapped (96 longer)."""
    host = draw(st.integers(0, net.num_addresses - 1))
    addr = type(net.network_address)(int(net.network_address) + host)
    text = draw(respelled_ip(addr))
    length = net.prefixlen + (96 if addr.version == 4 and ":" in text else 0)  # IPv4-mapped: 96 longer
    out = f"{text}/{'0' * draw(st.integers(0, 2))}{length}"
    if padded:
        out = draw(st.sampled_from(_GO_SPACES)) + out + draw(st.sampled_from(_GO_SPACES))
    return out


def legacy_ip(pool: list[str]) -> st.SearchStrategy[str]:
    """An address of ``pool`` in a legacy spelling."""
    return st.sampled_from(pool).flatmap(lambda t: respelled_ip(ip_address(t.strip())))


def legacy_cidr(pool: list[str], padded: bool = False) -> st.SearchStrategy[str]:
    return st.sampled_from(pool).flatmap(lambda t: respelled_cidr(ip_network(t, strict=False), padded))


def service_cidr() -> st.SearchStrategy[Obj]:
    """A ServiceCIDR: canonical most of the time (the API validates them strictly), wide, bad."""
    cidrs = st.lists(
        st.one_of(st.sampled_from(["10.96.0.0/16", "fd00:10:96::/112", "10.97.0.0/24", "0.0.0.0/0", "2000::/12"]),
                  st.sampled_from(BAD_CIDRS + LEGACY_CIDRS), any_cidr(), garbage()),
        max_size=3,
    )  # fmt: skip
    return optional_dict(
        {"kind": st.just("ServiceCIDR"), "metadata": sometimes_bad(optional_dict({"name": name()}, {}))},
        {"spec": sometimes_bad(optional_dict({}, {"cidrs": sometimes_bad(cidrs)}))},
    )


def garbage() -> st.SearchStrategy[Any]:
    """A value of the wrong type or shape for almost any field."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=True),
        st.text(max_size=6),
        st.sampled_from(["\x00", "10.96.0.1\x00", "80\x00", "\ud7ff", "-1"]),  # NUL: inet_pton raises ValueError
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )


def sometimes_bad(good: st.SearchStrategy[Any], weight: int = 6) -> st.SearchStrategy[Any]:
    return st.one_of(*([good] * weight), garbage())


def name() -> st.SearchStrategy[Any]:
    return st.one_of(
        *[st.sampled_from(NAMES)] * 6,
        st.text(min_size=0, max_size=80),
        st.just(""),
        garbage(),
    )


def namespace() -> st.SearchStrategy[Any]:
    return st.one_of(*[st.sampled_from(NAMESPACES)] * 6, st.none(), st.text(max_size=70))


def ip(pool: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(
        *[st.sampled_from(pool)] * 8,
        legacy_ip(pool),
        st.sampled_from(LEGACY_IPS),
        st.sampled_from(BAD_IPS),
        st.ip_addresses().map(str),
        garbage(),
    )


def any_cidr() -> st.SearchStrategy[str]:
    """Any prefix length on any address (host bits set most of the time), as text."""
    v4 = st.tuples(st.ip_addresses(v=4), st.integers(0, 32))
    v6 = st.tuples(st.ip_addresses(v=6), st.integers(0, 128))
    return st.one_of(v4, v6).map(lambda t: f"{t[0]}/{t[1]}")


def cidr(legacy: bool = True) -> st.SearchStrategy[str]:
    """One source range of a real shape: host prefixes, /0, IPv4-mapped IPv6, host bits set, or
    any length on any address; ``legacy``: also the spellings only kube-proxy's parser reads."""
    more = [legacy_cidr(OTHER_CIDRS + HOST_CIDRS + ZERO_CIDRS, padded=True)] if legacy else []
    return st.one_of(
        *more,
        st.sampled_from(HOST_CIDRS),
        st.sampled_from(ZERO_CIDRS),
        st.sampled_from(MAPPED_CIDRS),
        st.sampled_from(HOST_BITS_CIDRS),
        st.sampled_from(OTHER_CIDRS + CIDRS),
        any_cidr(),
        st.tuples(st.ip_addresses(), st.booleans()).map(lambda t: f"{t[0]}/{t[0].max_prefixlen if t[1] else 0}"),
    )


# Built once: a strategy made inside a draw is validated again at every draw (slow generation).
_CIDR_LISTS = {
    (n, legacy): st.lists(cidr(legacy), min_size=1, max_size=n) for n in (3, 4, 6) for legacy in (True, False)
}
_REPEATS = st.lists(st.integers(0, 5), max_size=6)


@st.composite
def cidr_list(draw: Any, max_size: int = 6, legacy: bool = True) -> list[str]:
    """A list of ranges: mixed families, and duplicates (the same text again, or the same prefix in
    other words: host bits set, another spelling, a range inside another)."""
    xs: list[str] = draw(_CIDR_LISTS[max_size, legacy])
    return xs + [xs[k % len(xs)] for k in draw(_REPEATS)]


def shaped_ip(pool: list[str]) -> st.SearchStrategy[Any]:
    """An address from ``pool``, IPv4-mapped IPv6, another text of one address, or any address."""
    return st.one_of(
        *[st.sampled_from(pool)] * 4,
        st.sampled_from(MAPPED_IPS),
        st.sampled_from(LONG_FORM_IPS),
        legacy_ip(pool),
        st.ip_addresses().map(str),
    )


def port_number() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from([1, 53, 80, 443, 8080, 65535]),
        st.sampled_from([1, 80, 8080]),
        st.integers(1, 65535),
        st.sampled_from([0, -1, 65536, 10**9, True, "80", 80.0, None]),
    )


def protocol() -> st.SearchStrategy[Any]:
    return st.one_of(
        *[st.sampled_from(["TCP", "UDP", "SCTP"])] * 6, st.sampled_from([None, "tcp", "ICMP", ""]), garbage()
    )


def port_name() -> st.SearchStrategy[Any]:
    return st.one_of(*[st.sampled_from(["", "http", "dns", "p"])] * 6, st.text(max_size=20), st.none())


def optional_dict(
    required: dict[str, st.SearchStrategy[Any]], optional: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional)


def metadata(service_label: bool = False) -> st.SearchStrategy[Any]:
    labels: dict[str, st.SearchStrategy[Any]] = {
        "service.kubernetes.io/service-proxy-name": st.one_of(st.sampled_from(["other", "nftproxy", ""]), garbage()),
    }
    req: dict[str, st.SearchStrategy[Any]] = {"name": name()}
    if service_label:
        req["labels"] = sometimes_bad(optional_dict({"kubernetes.io/service-name": name()}, {}), 10)
    else:
        req["labels"] = sometimes_bad(optional_dict({}, labels), 10)
    return sometimes_bad(
        optional_dict(
            req,
            {
                "namespace": namespace(),
                "resourceVersion": st.integers(1, 10**6).map(str),
                "annotations": sometimes_bad(
                    optional_dict(
                        {},
                        {
                            "service.kubernetes.io/topology-mode": st.sampled_from(["Auto", "", "bogus"]),
                            "endpoints.kubernetes.io/last-change-trigger-time": st.sampled_from(
                                ["2026-01-01T00:00:00Z", "not a time"]
                            ),
                            "nftproxy.io/load-balancing": st.sampled_from(
                                ["maglev", "source-hash", "round-robin", "random", "bogus"]
                            ),
                            "nftproxy.io/maglev-table-size": st.one_of(
                                st.sampled_from(["31", "37", "61", "250", "4099", "-31", ""]), garbage()
                            ),
                        },
                    )
                ),
            },
        ),
        12,
    )


def service_port(types: str) -> st.SearchStrategy[Any]:
    return sometimes_bad(
        optional_dict(
            {"port": port_number()},
            {
                "name": port_name(),
                "protocol": protocol(),
                "targetPort": st.one_of(port_number(), port_name()),
                "nodePort": st.one_of(st.integers(30000, 30005), st.sampled_from([0, 1, 65535, 65536, None, "x"])),
            },
        ),
        12,
    )


def service() -> st.SearchStrategy[Obj]:
    ips = st.one_of(
        st.lists(ip(SVC4), min_size=1, max_size=1),
        st.lists(ip(SVC6), min_size=1, max_size=1),
        st.tuples(ip(SVC4), ip(SVC6)).map(list),
        st.tuples(ip(SVC6), ip(SVC4)).map(list),
        st.lists(ip(SVC4 + SVC6), min_size=0, max_size=3),
        st.just(["None"]),
        garbage(),
    )
    ports = st.one_of(
        *[st.lists(service_port("any"), min_size=1, max_size=4)] * 6,
        st.just([]),
        st.lists(service_port("any"), min_size=50, max_size=120),  # huge
        garbage(),
    )
    spec = optional_dict(
        {"ports": ports},
        {
            "type": st.one_of(
                *[st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"])] * 6,
                st.sampled_from(["ExternalName", "Bogus", ""]),
                garbage(),
            ),
            "clusterIPs": ips,
            "clusterIP": ip(SVC4 + SVC6),
            "externalIPs": sometimes_bad(st.lists(ip(EXT4 + EXT6 + SVC4) | shaped_ip(EXT4 + EXT6), max_size=3)),
            "loadBalancerSourceRanges": sometimes_bad(
                st.one_of(
                    st.lists(st.sampled_from(CIDRS + BAD_CIDRS[:1]) | st.sampled_from(CIDRS), max_size=4),
                    cidr_list(),
                    cidr_list(),
                )
            ),
            "externalTrafficPolicy": st.one_of(st.sampled_from(["Cluster", "Local"]), st.sampled_from(["", "local"])),
            "internalTrafficPolicy": st.one_of(st.sampled_from(["Cluster", "Local"]), st.sampled_from(["", "x"])),
            "sessionAffinity": st.sampled_from(["ClientIP", "None", ""]),
            "sessionAffinityConfig": sometimes_bad(
                optional_dict(
                    {},
                    {
                        "clientIP": sometimes_bad(
                            optional_dict(
                                {},
                                {"timeoutSeconds": st.one_of(st.sampled_from([1, 10, 10800, 86400, 0, 86401, True]))},
                            )
                        )
                    },
                )
            ),
            "healthCheckNodePort": st.one_of(st.integers(30000, 32767), st.sampled_from([0, 65536, None, "x"])),
            "trafficDistribution": st.sampled_from(["PreferClose", "PreferSameNode", "", "x"]),
        },
    )
    status = optional_dict(
        {},
        {
            "loadBalancer": sometimes_bad(
                optional_dict(
                    {},
                    {
                        "ingress": sometimes_bad(
                            st.lists(
                                sometimes_bad(
                                    optional_dict(
                                        {},
                                        {
                                            "ip": ip(EXT4 + EXT6) | shaped_ip(EXT4 + EXT6),
                                            "ipMode": st.sampled_from(["VIP", "Proxy"]),
                                            "hostname": st.just("lb.example"),
                                        },
                                    )
                                ),
                                max_size=3,
                            )
                        )
                    },
                )
            )
        },
    )
    return optional_dict(
        {"kind": st.just("Service"), "metadata": metadata()},
        {"spec": sometimes_bad(spec, 15), "status": status},
    )


EP6_FORMS = ["FD00:10:244:1::2", "fd00:10:244:1:0:0:0:3", "fd00:10:244:0002::4"]  # other texts of EP6 addresses


def endpoint(version: int) -> st.SearchStrategy[Any]:
    pool = EP4 if version == 4 else EP6
    # IPv4-mapped: the API refuses it in an IPv6 slice (To4() != nil); the parser must cope anyway
    addr = ip(pool) if version == 4 else ip(pool) | st.sampled_from([*EP6_FORMS, "::ffff:10.244.1.2"])
    return sometimes_bad(
        optional_dict(
            {"addresses": st.one_of(*[st.lists(addr, min_size=1, max_size=2)] * 8, st.just([]), garbage())},
            {
                "conditions": sometimes_bad(
                    optional_dict(
                        {},
                        {
                            "ready": st.one_of(st.booleans(), st.none()),
                            "serving": st.one_of(st.booleans(), st.none()),
                            "terminating": st.one_of(st.booleans(), st.none()),
                        },
                    )
                ),
                "nodeName": st.one_of(st.sampled_from(NODES), st.none(), garbage()),
                "zone": st.one_of(st.sampled_from(["z1", "z2"]), garbage()),
                "hints": sometimes_bad(
                    optional_dict(
                        {},
                        {
                            "forZones": sometimes_bad(
                                st.lists(optional_dict({"name": st.sampled_from(["z1", "z2"])}, {}), max_size=2)
                            ),
                            "forNodes": sometimes_bad(
                                st.lists(optional_dict({"name": st.sampled_from(NODES)}, {}), max_size=2)
                            ),
                        },
                    )
                ),
            },
        ),
        12,
    )


def endpoint_slice() -> st.SearchStrategy[Obj]:
    def build(version: int) -> st.SearchStrategy[Obj]:
        eps = st.one_of(
            *[st.lists(endpoint(version), max_size=6)] * 6,
            st.lists(endpoint(version), min_size=100, max_size=200),  # huge
            garbage(),
        )
        ports = st.one_of(
            *[
                st.lists(
                    sometimes_bad(
                        optional_dict({}, {"name": port_name(), "protocol": protocol(), "port": port_number()}), 12
                    ),
                    max_size=3,
                )
            ]
            * 6,
            garbage(),
        )
        atype = st.one_of(
            *[st.just("IPv4" if version == 4 else "IPv6")] * 8, st.sampled_from(["FQDN", "IPv5", "ipv4"]), garbage()
        )
        return optional_dict(
            {"kind": st.just("EndpointSlice"), "metadata": metadata(service_label=True)},
            {"addressType": atype, "ports": ports, "endpoints": eps},
        )

    return st.one_of(build(4), build(6))


def node() -> st.SearchStrategy[Obj]:
    address = sometimes_bad(
        optional_dict(
            {},
            {
                "type": st.one_of(st.sampled_from(["InternalIP", "ExternalIP", "Hostname"]), garbage()),
                "address": ip(["198.18.0.1", "fd00:198:18::1", "198.18.0.2", "n1", "::ffff:198.18.0.3"]),
            },
        ),
        10,
    )
    return optional_dict(
        {"kind": st.just("Node"), "metadata": sometimes_bad(optional_dict({"name": st.sampled_from(NODES)}, {}))},
        {
            "status": sometimes_bad(optional_dict({}, {"addresses": sometimes_bad(st.lists(address, max_size=4))}), 10),
        },
    )


def any_object() -> st.SearchStrategy[Any]:
    return st.one_of(service(), service(), endpoint_slice(), endpoint_slice(), node(), service_cidr(), garbage())


# --------------------------------------------------------------------------- well-formed worlds
# Objects the parser takes whole (no Skipped), with every address field in its real shapes, and
# Services the compiler takes all the way (LoadBalancer IPs, ready endpoints in both families), so
# that every source range, external IP, LoadBalancer IP and endpoint address reaches the table.


_FAMILIES = st.sampled_from([(4,), (6,), (4, 6), (6, 4)])
_TYPES = st.sampled_from(["LoadBalancer", "LoadBalancer", "NodePort", "ClusterIP"])
_PORTS = st.lists(st.sampled_from([("http", 80, "TCP"), ("dns", 53, "UDP"), ("s", 9, "SCTP")]),
                  min_size=1, max_size=3, unique=True)  # fmt: skip
_RANGES: st.SearchStrategy[list[str]] = st.one_of(cidr_list(), cidr_list(3), st.just([]))
_PICK4 = st.lists(st.integers(0, 3), max_size=3, unique=True)
_PICK3 = st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)
_POLICY = st.sampled_from(["Cluster", "Local"])
_EP6 = EP6 + EP6_FORMS
_ENDPOINTS = {4: st.lists(st.sampled_from(EP4) | legacy_ip(EP4), min_size=1, max_size=3),
              6: st.lists(st.sampled_from(_EP6), min_size=1, max_size=3)}  # fmt: skip
_NODE = st.sampled_from(NODES)


def _maybe_legacy(text: str) -> st.SearchStrategy[str]:
    """``text`` as written, or in a legacy spelling (an IPv4 in an IPv6 text stays IPv4)."""
    return st.one_of(st.just(text), respelled_ip(ip_address(text)))


@st.composite
def shaped_service(draw: Any, i: int) -> tuple[Obj, list[Obj]]:
    """Service number ``i`` (its own name and ClusterIPs) and its EndpointSlices."""
    name = f"s{i}"
    v4, v6 = f"10.96.{i // 250}.{i % 250 + 1}", f"fd00:10:96::{i + 1:x}"
    cluster_ips = [v4 if f == 4 else v6 for f in draw(_FAMILIES)]
    svc_type = draw(_TYPES)
    ports = [
        {"name": pname, "port": number, "protocol": proto, "targetPort": 8080 + k, "nodePort": 30000 + 4 * i + k}
        for k, (pname, number, proto) in enumerate(draw(_PORTS))
    ]
    if svc_type == "ClusterIP":
        for p in ports:
            del p["nodePort"]
    spec: Obj = {"type": svc_type, "clusterIP": cluster_ips[0], "clusterIPs": cluster_ips, "ports": ports}
    spec["loadBalancerSourceRanges"] = draw(_RANGES)
    ext = [  # this Service's own (no conflicts); the second and third are one address in two texts
        f"198.19.0.{i + 1}", f"fd00:198:19::{i + 1:x}", f"FD00:198:19:0:0:0:0:{i + 1:x}", f"::ffff:198.19.2.{i + 1}"
    ]  # fmt: skip
    spec["externalIPs"] = [draw(_maybe_legacy(ext[k])) for k in draw(_PICK4)]
    etp = draw(_POLICY)
    spec["externalTrafficPolicy"] = etp
    if svc_type == "LoadBalancer" and etp == "Local":
        spec["healthCheckNodePort"] = 32000 + i
    obj: Obj = {"kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec}
    if svc_type == "LoadBalancer":  # one of each family most of the time, so ranges of both apply
        lb = [f"198.19.1.{i + 1}", f"fd00:198:19::1:{i + 1:x}", f"::ffff:198.19.3.{i + 1}"]
        obj["status"] = {"loadBalancer": {"ingress": [{"ip": draw(_maybe_legacy(lb[k]))} for k in draw(_PICK3)]}}
    slices: list[Obj] = []
    for f in (4, 6):
        slices.append(
            {
                "kind": "EndpointSlice",
                "metadata": {"name": f"{name}-{f}", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": f"IPv{f}",
                "ports": [{"name": p["name"], "port": p["targetPort"], "protocol": p["protocol"]} for p in ports],
                "endpoints": [
                    {"addresses": [a], "conditions": {"ready": True}, "nodeName": draw(_NODE)}
                    for a in draw(_ENDPOINTS[f])
                ],
            }
        )  # fmt: skip
    return obj, slices


_COUNT = {n: st.integers(1, n) for n in range(1, 9)}


@st.composite
def shaped_world(draw: Any, max_services: int = 5) -> list[Obj]:
    """A few well-formed Services with their slices (distinct names and ClusterIPs: no conflicts)."""
    out: list[Obj] = []
    for i in range(draw(_COUNT[max_services])):
        svc, slices = draw(shaped_service(i))
        out += [svc, *slices]
    return out


def shaped_networks(max_size: int = 4) -> st.SearchStrategy[list[str]]:
    """--cluster-cidr / --nodeport-addresses: the same shapes as source ranges, or none."""
    return st.one_of(st.just([]), cidr_list(max_size, legacy=False))
