"""Intentional differences from kube-proxy: the ONE list the differential suite accepts.

Each entry is a case name (tests/conformance/cases.py) with the reason nftproxy behaves
differently on purpose, and (RELEASES) the kube-proxy releases it differs from: the suite runs
against each release of hack/k8s-versions.sh (K8S_VERSION), and a DIFF against a release its row
does not name fails. The README section "Differences from kube-proxy" mirrors this list. Any
other DIFF fails the suite.
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
}


# -- the kube-proxy 1.38 fixes nftproxy has on every cluster: a difference from 1.37 only -----------
INTENTIONAL["udp-service-deleted"] = (
    "A UDP Service deleted loses the open flows to its ClusterIP, externalIPs and LoadBalancer IPs, "
    "as kube-proxy 1.38 does (kubernetes#141371) whatever the cluster's version: kube-proxy 1.37 "
    "kept them, so a client that kept sending went on reaching the deleted Service's pods."
)
INTENTIONAL["udp-service-deleted-externalip"] = INTENTIONAL["udp-service-deleted"]

# The kube-proxy releases (minor versions) each row differs from; a row not named here: every
# release the suite runs against (the rows above name theirs).
COMPARED = (37, 38)
RELEASES: dict[str, tuple[int, ...]] = {
    "node-ip-changed": COMPARED,  # 1.38's nodemanager exits too
    "chg-service-cidr-added": COMPARED,  # 1.38 still waits for its full sync
    "udp-endpoint-terminating": COMPARED,
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
    if reason is None or minor is None or minor in RELEASES.get(case, COMPARED):
        return reason
    return None
