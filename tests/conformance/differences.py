"""Intentional differences from kube-proxy: the ONE list the differential suite accepts.

Each entry is a case name (tests/conformance/cases.py) with the reason nftproxy behaves
differently on purpose, and (RELEASES) the kube-proxy releases it differs from: the suite runs
against each release of hack/k8s-versions.sh (K8S_VERSION), and a DIFF against a release its row
does not name fails. The README section "Differences from kube-proxy" mirrors this list (docs/differences.md has the
details). Any other DIFF fails the suite.
"""

from __future__ import annotations

INTENTIONAL: dict[str, str] = {
    "node-ip-changed": (
        "When its Node's IPs change (or the Node is deleted), kube-proxy v1.37 exits so that its "
        "DaemonSet restarts it, and NodePorts, health checks and source ranges wait for the restart. "
        "nftproxy keeps running and resyncs at once with the new addresses; the NodePorts then "
        "answer as the restarted kube-proxy's do (case node-ip-changed-probes matches)."
    ),
    "chg-service-cidr-added": (
        "A new ServiceCIDR's unallocated addresses are dropped at the next sync. kube-proxy "
        "(v1.34-v1.37) notes the change and rewrites its drop rule only at its hourly full sync or "
        "a restart, so for up to an hour such packets leave the node. A kube-proxy that starts before "
        "its ServiceCIDR watch has delivered (it does not wait for it) lacks the rule in the same way "
        "until that full sync. nftproxy lists the ServiceCIDRs before its first sync and applies a "
        "change at the next sync. Dropping them at once is what the rule is for."
    ),
    "udp-endpoint-terminating": (
        "While a UDP port has a ready endpoint, a terminating endpoint's open flows are deleted "
        "(under a Cluster policy), so the client's next datagram goes to a ready endpoint while the "
        "terminating one still answers. kube-proxy keeps them until the endpoint is gone: a client "
        "that reuses one socket (glibc's resolver to CoreDNS) then sends its lookups to the exited "
        "pod until the next sync, and loses them (tests/e2e/test_cluster_dns.py, docs/e2e.md)."
    ),
    "takeover-dns-contested": (
        "A Service whose externalIPs (or LoadBalancer IPs) name another Service's ClusterIP, on one of "
        "its ports, takes that port from it in kube-proxy whenever kube-proxy happens to write it last "
        "(its order changes from one sync to the next): any user who may create a Service can take "
        "kube-dns's 53/UDP this way. nftproxy always leaves the ClusterIP's own Service the port, "
        "reports the other Service's frontend as left out (ProxyStatus, a PortConflict Event), and "
        "programs every other frontend of both (case takeover-dns matches)."
    ),
    "takeover-ext-contested": (
        "Two Services claiming one externalIP (or LoadBalancer IP) and port: kube-proxy sends it to "
        "whichever it writes last in a sync, which can change at every sync. nftproxy gives it to the "
        "older Service (creationTimestamp, then namespace/name), the same on every node and after "
        "every restart, and reports the other's frontend as left out; every other frontend of both "
        "is programmed (case takeover-ext matches)."
    ),
    "extip-equals-own-clusterip": (
        "An externalIP that is the Service's own ClusterIP: kube-proxy writes two elements on the "
        "one key (ClusterIP . proto . port) and the externalIP's, written last, wins, so the "
        "ClusterIP is served as an external frontend (a pod's connection is masqueraded; under "
        "externalTrafficPolicy Local it would take this node's endpoints). nftproxy keeps the "
        "ClusterIP a ClusterIP, as it gives a Service's own ClusterIP precedence over any "
        "externalIP (compiler/claims.py)."
    ),
    "affinity-across-policies": (
        "ClientIP affinity across a Local-policy and a Cluster-policy frontend of one Service port "
        "(an internalTrafficPolicy Local ClusterIP and its NodePort; an externalTrafficPolicy Local "
        "NodePort or LB IP and a ClusterIP reached from outside): kube-proxy keeps a set per "
        "endpoint that both its policy chains consult, so a client pinned to a node-local endpoint "
        "through one kind is sent to it through the other. nftproxy keeps one record per client for "
        "the Cluster-policy frontends and another for the Local-policy ones: a client keeps one "
        "endpoint through every frontend of one kind, and may have another through the other kind. "
        "One shared record could send Local-policy traffic, whose source is kept, to another "
        "node's endpoint (its reply would bypass this node)."
    ),
    "localhost-nodeport-dead-endpoint": (
        "Localhost NodePorts (userspace proxy): kube-proxy dials the one endpoint it picked (5 s) "
        "and closes the client's connection if that fails; nftproxy gives each endpoint 1 s "
        "(refused and unreachable fail at once) and tries the next in the algorithm's order, up to "
        "3, so a client is served while an endpoint is dead (a pod that stopped listening before "
        "its endpoint was removed)."
    ),
    "health-counts-endpoints-of-other-ports": (
        "healthCheckNodePort: kube-proxy counts this node's ready endpoints listed under any port of "
        "the Service's EndpointSlices, also a port the Service does not have, and answers 200 for a "
        "node where every packet to the Service's ports is dropped (no local endpoint for them). "
        "nftproxy counts the endpoints of the Service's own ports, the ones its traffic can reach, "
        "so load balancers are not sent to such a node."
    ),
    "no-local-endpoint-counts-external-ipv6": (
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total: a dual-stack Service with "
        "externalTrafficPolicy Local and externalIPs of one family only (case "
        "etp-local-extip-one-family) is counted by kube-proxy's proxier of the other family as "
        "having no local endpoint, though it has no external frontend in that family (and may have "
        "local endpoints). nftproxy counts a Service port of a family only when it has a "
        "Local-policy frontend there and no endpoint on this node."
    ),
    "service-cidr-too-wide": (
        "A ServiceCIDR's CIDR wider than /8 (IPv4) or /16 (IPv6): kube-proxy drops every new "
        "connection to an address of it that is not a ClusterIP, forwarded or from the node, so a "
        "ServiceCIDR of 0.0.0.0/0 (the apiserver accepts it) would cut every node off from pods on "
        "other nodes, the Internet, DNS and the apiserver at kube-proxy's next restart or hourly full "
        "sync. nftproxy leaves that CIDR out and reports it (log, ProxyStatus, an Event), and drops "
        "the unallocated addresses of the object's other CIDRs as kube-proxy does (case "
        "addr-service-cidr-narrow-beside-wide matches)."
    ),
}


# -- the kube-proxy 1.38 fixes nftproxy has on every cluster: a difference from 1.37 only -----------
INTENTIONAL["udp-service-deleted"] = (
    "A UDP Service deleted loses the open flows to its ClusterIP, externalIPs and LoadBalancer IPs, "
    "as kube-proxy 1.38 does (kubernetes#141371) whatever the cluster's version: kube-proxy 1.37 "
    "kept them, so a client that kept sending went on reaching the deleted Service's pods."
)
INTENTIONAL["udp-service-deleted-externalip"] = INTENTIONAL["udp-service-deleted"]

# The kube-proxy releases (minor versions) each row differs from: every row names its own (a unit
# test checks), each with what 1.38 does (its pkg/proxy read against 1.37.2's).
COMPARED = (37, 38)
RELEASES: dict[str, tuple[int, ...]] = {
    "node-ip-changed": COMPARED,  # 1.38's nodemanager exits too
    "chg-service-cidr-added": COMPARED,  # 1.38 still waits for its full sync
    "udp-endpoint-terminating": COMPARED,  # 1.38's CleanStaleEntries keeps a serving endpoint's flows
    "takeover-dns-contested": COMPARED,  # 1.38 writes the elements as 1.37: the last one wins
    "takeover-ext-contested": COMPARED,
    "extip-equals-own-clusterip": COMPARED,
    "affinity-across-policies": COMPARED,  # the same per-endpoint affinity sets
    "localhost-nodeport-dead-endpoint": COMPARED,  # localnodeportproxy unchanged in 1.38
    "health-counts-endpoints-of-other-ports": COMPARED,  # healthcheck/service_health.go unchanged
    "no-local-endpoint-counts-external-ipv6": COMPARED,
    "service-cidr-too-wide": COMPARED,  # the same drop rule for every ServiceCIDR
    "udp-service-deleted": (37,),
    "udp-service-deleted-externalip": (37,),
}


# kube-proxy metrics (tests/conformance test_metrics_as_kube_proxy) nftproxy does not export as
# kube-proxy does, each with the reason.
METRICS: dict[str, str] = {}


def accepted(case: str, minor: int | None = None) -> str | None:
    """The reason a DIFF in ``case`` against kube-proxy 1.``minor`` (None: any release) is
    intentional, or None."""
    if case.startswith("metric:"):
        return METRICS.get(case.removeprefix("metric:"))
    reason = INTENTIONAL.get(case)
    if reason is None or minor is None or minor in RELEASES[case]:
        return reason
    return None
