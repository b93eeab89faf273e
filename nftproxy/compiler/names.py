"""Every name in our table, written once: the sets and maps, the endpoint maps per count and
algorithm, the width of the frontend each is keyed by, the recognisers of per-count names, and
the names of ``nftproxy trace``'s temporary chains. The compiler writes the table with these; the
readers (diagnose/verify, explain, trace, the syncer's checks) read it back with these.

Pure: no kernel, no Kubernetes.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from typing import NamedTuple

# -- the dispatch verdict maps: a frontend's first lookup ---------------------------------
SERVICE_IPS = "service-ips"  # Service IP . proto . port -> goto its chain
SERVICE_NODEPORTS = "service-nodeports"  # proto . NodePort -> goto its chain
NO_ENDPOINT_SERVICES = "no-endpoint-services"  # Service IP . proto . port -> reject / drop
NO_ENDPOINT_NODEPORTS = "no-endpoint-nodeports"  # proto . NodePort -> reject / drop
DISPATCH_MAPS = (SERVICE_IPS, SERVICE_NODEPORTS, NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS)

# -- the other sets and maps -------------------------------------------------------------
CLUSTER_IPS = "cluster-ips"  # every ClusterIP: its other ports are rejected
NODEPORT_IPS = "nodeport-ips"  # the addresses NodePorts answer on (config)
CLUSTER_CIDRS = "cluster-cidrs"  # pod CIDRs: sources not masqueraded (config, --detect-local-mode ClusterCIDR)
NODE_POD_CIDRS = "node-pod-cidrs"  # this node's Node.spec.podCIDRs (config, --detect-local-mode NodeCIDR)
SERVICE_CIDRS = "service-cidrs"  # the ServiceCIDRs' ranges: an unallocated address is dropped
HAIRPIN_ENDPOINTS = "hairpin-endpoints"  # endpoint . itself . proto . port
FIREWALL_IPS = "firewall-ips"  # LoadBalancer IP . proto . port with loadBalancerSourceRanges
FIREWALL_ALLOW = "firewall-allow"  # … . allowed source range
AFFINITY_SERVICES = "affinity-services"  # Service IP . proto . port -> goto affinity-record-<tag>-<timeout>
AFFINITY_NODEPORTS = "affinity-nodeports"  # proto . NodePort -> goto affinity-record-<tag>-<timeout>
STICKY_SERVICES = "sticky-services"  # Service IP . proto . port -> jump sticky-<tag>-<timeout>
STICKY_NODEPORTS = "sticky-nodeports"  # proto . NodePort -> jump sticky-<tag>-<timeout>
LOCAL_POLICY_SHORT_CIRCUIT = "local-policy-short-circuit"  # eTP Local: pod/node traffic to all endpoints
NODEPORT_SHORT_CIRCUIT = "nodeport-short-circuit"
# round-robin (balancing.py): frontend -> the Service port's own chain (all endpoints / this node's)
RR_SERVICES, RR_NODEPORTS = "rr-services", "rr-nodeports"
RR_LOCAL_SERVICES, RR_LOCAL_NODEPORTS = "rr-local-services", "rr-local-nodeports"
# elements from the config, not from any Service (the pod-source sets: only the mode's own is declared)
CONFIG_SETS = (CLUSTER_CIDRS, NODE_POD_CIDRS, NODEPORT_IPS, SERVICE_CIDRS)
POD_SOURCE_SETS = (CLUSTER_CIDRS, NODE_POD_CIDRS)

# -- localhost NodePorts (gate KubeProxyNFTablesLocalhostNodePorts, compiler/features.py): with
# --nodeport-addresses holding 127.0.0.1 (``localhost``) TCP is served by the userspace proxy
# (nftproxy/localhost_proxy/); nftables cannot DNAT loopback, so the other protocols' packets to a
# loopback NodePort (all protocols' without that proxy) are rejected and counted, with kube-proxy's
# names (its nftables_localhost_nodeport_rejected_packets_total reads these counters).
LOCALHOST_NODEPORT_REJECT_PORTS = "localhost-nodeport-reject-ports"  # proto . NodePort -> goto its reject chain
LOCALHOST_NODEPORT_REJECT_CHAIN = "localhost-nodeport-reject-"  # + protocol


def localhost_nodeport_reject_chain(proto: str) -> str:
    """``localhost-nodeport-reject-udp``: counts into its counter, then rejects."""
    return LOCALHOST_NODEPORT_REJECT_CHAIN + proto


def localhost_nodeport_rejected_counter(proto: str) -> str:
    """``localhost-nodeport-rejected-udp``: the named counter of one protocol's rejected packets."""
    return f"localhost-nodeport-rejected-{proto}"


# -- per-Service traffic counters (--service-counters; compiler/counters.py): sets whose elements
# carry their own counter (declared with ``counter``), keyed by a frontend; the dispatch and
# no-endpoint maps get the flag too. Read with one listing of these sets (diagnose/counters.py).
SERVICE_TRAFFIC = "service-traffic"  # Service IP . proto . port: packets, bytes both ways
NODEPORT_TRAFFIC = "nodeport-traffic"  # proto . NodePort
SERVICE_CONNECTIONS = "service-connections"  # Service IP . proto . port: new connections
NODEPORT_CONNECTIONS = "nodeport-connections"  # proto . NodePort
TRAFFIC_SETS = (SERVICE_TRAFFIC, NODEPORT_TRAFFIC, SERVICE_CONNECTIONS, NODEPORT_CONNECTIONS)
COUNTED_MAPS = (NO_ENDPOINT_SERVICES, NO_ENDPOINT_NODEPORTS)  # the no-endpoint maps: their rejects, drops
COUNT_PREROUTING, COUNT_OUTPUT = "count-prerouting", "count-output"  # base chains, after DNAT
SERVICE_COUNTERS = "service-counters"  # jumped to for DNATed packets: -> count-<proto>
COUNT_CHAIN = "count-"  # + protocol


def count_chain(proto: str) -> str:
    """``count-tcp``: the counting rules of one protocol (nft needs it known for ``proto-dst``)."""
    return COUNT_CHAIN + proto


# -- sessionAffinity ClientIP: per Service port and endpoint list, as kube-proxy's per-endpoint
# sets, one record per client shared by every frontend of the port (ClusterIP, NodePort,
# externalIPs, LoadBalancer IPs) that uses the same endpoint list. <tag>: a digest of the
# Service port ("l" appended: its Local-policy list), <timeout>: sessionAffinity's seconds.
#   map affinity-<tag>-<timeout>       client -> endpoint . port (IPv4) / endpoint (IPv6)
#   map affinity-port-<tag>-<timeout>  client -> endpoint port (IPv6 only: nft 1.0.6 asserts on
#                                      `update` with data `ipv6_addr . inet_service`)
#   chain sticky-<tag>-<timeout>          dnat a known client to its endpoint (reached from the
#                                         load-balance chains through sticky-services/-nodeports)
#   chain affinity-record-<tag>-<timeout> write the record (postrouting, through affinity-services/-nodeports)
PORT_TAG = 10  # hex digits of a Service port's digest (port_tag)
AFFINITY_KIND = "affinity"  # kind "affinity:<tag>", N: the timeout
_AFFINITY_MAP = re.compile(rf"^affinity-(port-)?([0-9a-f]{{{PORT_TAG}}}l?)-(\d+)$")


def port_tag(service: str, port: str, proto: str) -> str:
    """A Service port's digest (10 hex digits) in the names of its own objects: its affinity
    records and chains, and its round-robin map and chain (balancing.tag)."""
    return hashlib.sha256(f"{service}/{port}/{proto}".encode()).hexdigest()[:PORT_TAG]


def affinity_map(tag: str, timeout: int) -> str:
    return f"affinity-{tag}-{timeout}"


def affinity_port_map(tag: str, timeout: int) -> str:
    return port_map_of(affinity_map(tag, timeout))


def port_map_of(record: str) -> str:
    """``affinity-<tag>-<timeout>`` -> its IPv6 port map ``affinity-port-<tag>-<timeout>``."""
    return "affinity-port-" + record.removeprefix("affinity-")


def sticky_chain(tag: str, timeout: int) -> str:
    return f"sticky-{tag}-{timeout}"


def affinity_record_chain(tag: str, timeout: int) -> str:
    return f"affinity-record-{tag}-{timeout}"


def is_affinity_map(set_name: str) -> bool:
    """A dynamic map the packet path writes (client -> endpoint): never compared with a desired table."""
    return _AFFINITY_MAP.match(set_name) is not None


def affinity_timeout_of(name: str) -> int | None:
    """The timeout in an affinity map's or chain's name (``…-<timeout>``)."""
    m = re.search(r"-(\d+)$", name)
    return int(m.group(1)) if m else None


# -- endpoint maps: <base>[-<tag>]-<N>, keyed by frontend . slot ----------------------------
ENDPOINTS = "endpoints"  # all endpoints of an IP frontend (ClusterIP, external, LoadBalancer)
LOCAL_ENDPOINTS = "local-endpoints"  # this node's, for Local policies
NODEPORT_ENDPOINTS = "nodeport-endpoints"
NODEPORT_LOCAL_ENDPOINTS = "nodeport-local-endpoints"
# The endpoint maps of each per-count kind, by the frontend they are keyed by.
IP_ENDPOINT_MAPS = {"lb": (ENDPOINTS,), "local": (LOCAL_ENDPOINTS,)}
NODEPORT_ENDPOINT_MAPS = {"nodeport": (NODEPORT_ENDPOINTS,), "nodeport-local": (NODEPORT_LOCAL_ENDPOINTS,)}

# -- the width of the frontend a set's keys start with --------------------------------------
IP_FRONTEND = 3  # address . proto . port
NODEPORT_FRONTEND = 2  # proto . NodePort
FRONTEND_WIDTH = {
    SERVICE_IPS: IP_FRONTEND,
    NO_ENDPOINT_SERVICES: IP_FRONTEND,
    SERVICE_NODEPORTS: NODEPORT_FRONTEND,
    NO_ENDPOINT_NODEPORTS: NODEPORT_FRONTEND,
    AFFINITY_SERVICES: IP_FRONTEND,
    AFFINITY_NODEPORTS: NODEPORT_FRONTEND,
    STICKY_SERVICES: IP_FRONTEND,
    STICKY_NODEPORTS: NODEPORT_FRONTEND,
    LOCAL_POLICY_SHORT_CIRCUIT: IP_FRONTEND,
    NODEPORT_SHORT_CIRCUIT: NODEPORT_FRONTEND,
    FIREWALL_IPS: IP_FRONTEND,
    FIREWALL_ALLOW: IP_FRONTEND,
    LOCALHOST_NODEPORT_REJECT_PORTS: NODEPORT_FRONTEND,
    RR_SERVICES: IP_FRONTEND,
    RR_LOCAL_SERVICES: IP_FRONTEND,
    RR_NODEPORTS: NODEPORT_FRONTEND,
    RR_LOCAL_NODEPORTS: NODEPORT_FRONTEND,
    SERVICE_TRAFFIC: IP_FRONTEND,
    NODEPORT_TRAFFIC: NODEPORT_FRONTEND,
    SERVICE_CONNECTIONS: IP_FRONTEND,
    NODEPORT_CONNECTIONS: NODEPORT_FRONTEND,
}


# the infixes of the load-balancing algorithms' per-count objects (balancing.py; random: none)
SOURCE_HASH_TAG = "sh"  # endpoints-sh-N, load-balance-sh-N, …
MAGLEV_TAG = "mg"  # endpoints-mg-M, load-balance-mg-M, … (M: the Maglev table's slots)


class EndpointMap(NamedTuple):
    base: str  # endpoints | local-endpoints | nodeport-endpoints | nodeport-local-endpoints
    tag: str  # the load-balancing algorithm's infix ("" random, "sh" source-hash, "mg" maglev)
    n: int  # N: the map holds slots 0 … N-1 (maglev: M, the table's size)

    @property
    def width(self) -> int:
        return NODEPORT_FRONTEND if self.base.startswith("nodeport-") else IP_FRONTEND

    @property
    def kind(self) -> str:
        """The map's base name with its algorithm (``endpoints``, ``endpoints-sh``)."""
        return f"{self.base}-{self.tag}" if self.tag else self.base


_ENDPOINT_MAP = re.compile(r"^((?:nodeport-)?(?:local-)?endpoints)-(?:([a-z][a-z0-9]*)-)?(\d+)$")


def endpoint_map(set_name: str) -> EndpointMap | None:
    """``endpoints-3``, ``nodeport-local-endpoints-sh-2`` …: an endpoint map's parts, else None."""
    m = _ENDPOINT_MAP.match(set_name)
    return EndpointMap(m.group(1), m.group(2) or "", int(m.group(3))) if m else None


def frontend_width(set_name: str) -> int | None:
    """How many leading key fields of this set's elements are a frontend (None: not keyed so)."""
    width = FRONTEND_WIDTH.get(set_name)
    if width is not None:
        return width
    em = endpoint_map(set_name)
    return em.width if em is not None else None


# -- round-robin (balancing.py): a Service port's own map, keyed by slot only ----------------
RR_PREFIX = "rr-"
_RR_MAP = re.compile(rf"^rr-([0-9a-f]{{{PORT_TAG}}}s?)-(\d+)$")


def rr_map(set_name: str) -> tuple[str, int] | None:
    """``rr-<tag>-<N>``, a round-robin Service port's own map: (tag, N), else None."""
    m = _RR_MAP.match(set_name)
    return (m.group(1), int(m.group(2))) if m else None


# -- nftproxy trace's temporary chains -------------------------------------------------------
# A trace adds two base chains to our table, ``trace-<deadline>-<pid>-prerouting`` and
# ``…-output``, whose rule also matches ``meta time < deadline``: even if the trace process is
# killed, its rule stops marking packets at the deadline. The desired table never contains them,
# so a full sync deletes them; the syncer's periodic check tolerates them until their deadline
# (a trace in progress is not cut short) and then repairs the table, which removes them.
TRACE_PREFIX = "trace-"
TRACE_COMMENT = "nftproxy trace"
_TRACE_CHAIN = re.compile(r"^trace-(\d+)-(\d+)-(prerouting|output)$")


def trace_chains(deadline: float, pid: int) -> tuple[str, str]:
    base = f"{TRACE_PREFIX}{int(deadline)}-{pid}"
    return f"{base}-prerouting", f"{base}-output"


def is_trace_chain(name: str) -> bool:
    return _TRACE_CHAIN.match(name) is not None


def live_trace_chains(names: Iterable[str], now: float | None = None) -> set[str]:
    """The trace chains among ``names`` whose deadline has not passed."""
    now = time.time() if now is None else now
    out = set()
    for n in names:
        m = _TRACE_CHAIN.match(n)
        if m and int(m.group(1)) > now:
            out.add(n)
    return out


# -- the handover table of a table replacement -----------------------------------------------
# A table replaced in one transaction (a layout change: an upgrade, a rollback; a re-declared set)
# has its NEW sets looked up empty for a moment after the kernel commits it (measured: a NodePort
# SYN then goes un-DNATed and is refused; tests/netns/test_replacement_window.py). So the new
# table's contents are loaded first, whole, under this name (its own transaction: once it returns,
# every element is live), the table is replaced, and the handover table is deleted: during the
# replacement the handover table's rules answer. A crash in between leaves it; a full sync deletes it.
HANDOVER_SUFFIX = "-handover"
HANDOVER_COMMENT = "nftproxy handover: the new rules while the table is replaced; deleted right after"


def handover_table(table: str) -> str:
    return f"{table}{HANDOVER_SUFFIX}"
