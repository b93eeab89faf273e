"""An upgrade across a change of the table's layout, as a user makes it, on the real cluster.

The previous release (conftest's ``previous_release``: commit 882ad58, table layout 2, its image
built by its own hack/images.sh and imported into each node) is installed with ITS chart, as a
user of that release has it, on nodes without any nftproxy table; then, under continuous new
connections from a pod, a node and the outside client, ``helm upgrade`` to this commit's chart and
image (its LAYOUT: 5), and ``helm rollback`` to the first
revision (the previous chart and image) under the same traffic. The two charts take the same
values (this one adds the ServiceCIDR RBAC the new code needs and a kubeVersion range), so both
revisions are installed with the same ones.

Expected: on each node the old table replaced by the other layout in ONE transaction. The upgrade
fails no request: this release loads the new contents as a handover table first (names
.HANDOVER_SUFFIX), which answers while the kernel's new sets are not yet live. The previous release
has no handover table, so a connection during the moment after ITS replacement can be refused
(tests/netns/test_replacement_window.py; 2 of 8 rolls here lost a connection so): the rollback accepts
a refused connection only there (WINDOW), and none from the pod.

A netlink listener in each node's network namespace (testkit.lab.nftwatch.GenerationWatch) records
every nftables transaction committed there during the roll: exactly one of them may delete or
create a ``nftproxy`` table, and it must delete both (ip, ip6) and create both with the new layout.
A replacement in two transactions (delete, then load), or a table loaded anew in steps, fails it.
The new pod's log says its first sync was a full one.

Shares the session's cluster with test_realcluster.py (which leaves it with its release
uninstalled, and with it every node's tables): its first fixture uninstalls whatever release is
there and removes any table left (``nftproxy cleanup``), so it starts from the same state alone or
after it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from nftproxy.compiler.skeleton import LAYOUT
from testkit.k8s.cluster import eventually
from testkit.lab.nftwatch import Generation, GenerationWatch
from testkit.realcluster import RealCluster
from testkit.realcluster import workload as w

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]
OLD_LAYOUT = 2  # the previous release's
TABLES = {("ip", "nftproxy"), ("ip6", "nftproxy")}
HANDOVER = "nftproxy-handover"  # names.handover_table: this release loads it before a replacement
HANDOVERS = {("ip", HANDOVER), ("ip6", HANDOVER)}
# The previous release replaces a table in one transaction without a handover table, and the kernel
# looks up a new table's new sets empty for a moment after its commit: a connection in that window
# is refused (tests/netns/test_replacement_window.py). A failure of the rollback is accepted only
# there: a refused connection to a node, within WINDOW seconds of that node's replacement.
WINDOW = 0.5


def log(s: str) -> None:
    print(s, flush=True)


def released(c: RealCluster) -> bool:
    return w.RELEASE in c.helm("list", "-n", w.NAMESPACE, "-q").split()


def pods_running(c: RealCluster, image: str, not_named: dict[str, str] | None = None) -> dict[str, str] | None:
    """node -> name of its Ready nftproxy pod running IMAGE (none named as in NOT_NAMED), once
    every node has one."""
    pods = {
        node: p
        for node, p in w.nftproxy_pods(c).items()
        if p["spec"]["containers"][0]["image"] == image
        and w.pod_ready(p)
        and p["metadata"]["name"] != (not_named or {}).get(node)
    }
    return {n: p["metadata"]["name"] for n, p in pods.items()} if len(pods) == len(c.nodes) else None


def first_sync(c: RealCluster, pod: str) -> str | None:
    """The pod's log line of its first sync ("synced (full): N ops, …"), once it is there."""
    log_text = c.kubectl("logs", "-n", w.NAMESPACE, pod, check=False)
    return next((line for line in log_text.splitlines() if "synced (" in line), None)


def web_pod_ips(c: RealCluster) -> set[str]:
    """The addresses of the web Deployment's Ready pods (the web Services' endpoints)."""
    items = c.kubectl_json("get", "pods", "-n", "default", "-l", "app=web")["items"]
    return {p["status"]["podIP"] for p in items if w.pod_ready(p) and not p["metadata"].get("deletionTimestamp")}


def settled(c: RealCluster, pods: dict[str, str], layout: int, ip: str) -> dict[str, str] | None:
    """Each pod's first-sync line, once every pod has synced and every node's table has LAYOUT and
    serves IP with every Ready web pod as an endpoint. The ClusterIP alone is not enough: a proxy
    that synced the Service before the pods turned Ready adds them up to a sync period later, and a
    request meanwhile is refused (a NodePort with no endpoint), as it should be."""
    lines = {node: first_sync(c, pod) for node, pod in pods.items()}
    endpoints = web_pod_ips(c)
    if not all(lines.values()) or not endpoints:
        return None
    for node in pods:
        table = w.nft_table(c, node)
        if f'comment "nftproxy layout {layout} ' not in table or ip not in table:
            return None
        if any(not re.search(rf"\b{re.escape(e)}\b", table) for e in endpoints):
            return None
    return {n: str(line) for n, line in lines.items()}


def roll(c: RealCluster, what: str, helm: Callable[[], object], image: str, layout: int) -> dict[str, Any]:
    """HELM (an upgrade or a rollback to IMAGE) under traffic, with a GenerationWatch on every
    node: the traffic's results, the transactions that touched the nftproxy tables, timings."""
    ip = w.cluster_ip(c, "web")
    before = {node: p["metadata"]["name"] for node, p in w.nftproxy_pods(c).items()}
    layouts_before = {n.name: w.table_layout(c, n.name) for n in c.nodes}
    out: dict[str, Any] = {"pods_before": before, "layouts_before": layouts_before}
    watches = {n.name: GenerationWatch(n.netns) for n in c.nodes}
    t0 = time.monotonic()

    def action() -> None:
        nonlocal t0
        t0 = time.monotonic()  # traffic runs since 2 s
        log(f"    {what}: started")
        helm()
        out["helm_s"] = time.monotonic() - t0
        out["pods_after"] = eventually(
            lambda: pods_running(c, image, before), timeout=60, what=f"a new Ready pod of {image} on each node"
        )
        out["first_syncs"] = eventually(
            lambda: settled(c, out["pods_after"], layout, ip), timeout=60, what=f"layout {layout} on each node"
        )
        out["rolled_s"] = time.monotonic() - t0
        log(f"    {what}: helm {out['helm_s']:.1f}s, every node in layout {layout} after {out['rolled_s']:.1f}s")

    try:
        out["results"] = w.with_traffic(c, action, settle=3)
    finally:
        time.sleep(0.5)  # the last notifications
        for watch in watches.values():
            watch.close()
    out["generations"] = {node: watch.generations("nftproxy") for node, watch in watches.items()}
    out["handovers"] = {node: watch.generations(HANDOVER) for node, watch in watches.items()}
    out["overruns"] = {node: watch.overruns for node, watch in watches.items()}
    out["layouts_after"] = {n.name: w.table_layout(c, n.name) for n in c.nodes}
    for node, gens in out["generations"].items():
        log(f"    {what}, {node}: {len(gens)} transactions on the nftproxy tables:")
        for g in gens:
            log(f"      +{g.at - t0:.2f}s {g.summary()}")
    for name, r in out["results"].items():
        seconds = f" in {r['seconds']}s" if "seconds" in r else ""
        log(f"    {what}, traffic from {name}: {r['ok']} ok, {r['failed']} failed{seconds} {r.get('errors', [])[:3]}")
    return out


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def installed(previous_release: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """The previous release installed from nothing (no release, no nftproxy table on the nodes),
    with its own chart and image, and the web workload; both tables in its layout."""
    c = cluster
    old = previous_release
    assert old["image"] != c.images["nftproxy"], "the previous release's image has the current one's tag"
    c.import_image(old["image"], old["archive"])
    if released(c):
        c.helm("uninstall", w.RELEASE, "-n", w.NAMESPACE, "--wait", "--timeout", "120s")
    eventually(lambda: not w.nftproxy_pods(c) or None, timeout=60, what="no nftproxy pod")
    for n in c.nodes:
        c.on_node(n.name, sys.executable, "-m", "nftproxy", "cleanup")
    w.helm_upgrade(c, None, "--install", chart=old["chart"], image=old["image"])
    c.kubectl("apply", "-f", "-", input=w.web_manifests())
    c.kubectl("rollout", "status", "deployment/web", "--timeout=120s")
    c.kubectl("wait", "--for=condition=Ready", "pod/client", "--timeout=120s")
    pods = eventually(lambda: pods_running(c, old["image"]), timeout=60, what="the previous release's pods Ready")
    ip = w.cluster_ip(c, "web")
    syncs = eventually(lambda: settled(c, pods, OLD_LAYOUT, ip), timeout=60, what="the web Service in each table")
    log(f"    previous release ({old['image']}) installed: {syncs}")
    return {"revision": w.helm_revision(c), "pods": pods, "image": old["image"]}


@pytest.fixture(scope="module")
def upgraded(installed: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """`helm upgrade` to this commit's chart and image, under traffic (see roll())."""
    c = cluster
    new = c.images["nftproxy"]
    # --atomic (implies --wait): a failed upgrade would roll itself back; the chart supports it
    return roll(c, "helm upgrade", lambda: w.helm_upgrade(c, None, "--atomic", chart=w.CHART, image=new), new, LAYOUT)


@pytest.fixture(scope="module")
def rolled_back(upgraded: dict[str, Any], installed: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """`helm rollback` to the previous release's revision, under traffic."""
    c = cluster
    rev = installed["revision"]
    return roll(c, "helm rollback", lambda: w.helm_rollback(c, rev), installed["image"], OLD_LAYOUT)


# ---------------------------------------------------------------------------------------------- checks


def replacements(gens: list[Generation]) -> list[Generation]:
    """The transactions that deleted or created an nftproxy table."""
    return [g for g in gens if g.deleted_tables() or g.created_tables()]


def assert_replaced_in_one_transaction(rolled: dict[str, Any], old: int, new: int) -> None:
    nodes = set(rolled["generations"])  # every node of the cluster (2 in make test)
    assert len(nodes) >= 2, nodes
    assert rolled["layouts_before"] == dict.fromkeys(nodes, old)
    assert rolled["layouts_after"] == dict.fromkeys(nodes, new)
    assert rolled["overruns"] == dict.fromkeys(nodes, 0)  # every notification was read
    for node, gens in rolled["generations"].items():
        replaced = replacements(gens)
        assert len(replaced) == 1, (node, [g.summary() for g in gens])
        assert replaced[0].deleted_tables() == TABLES, (node, replaced[0].summary())
        assert replaced[0].created_tables() == {t: new for t in TABLES}, (node, replaced[0].summary())
        # and the new pod's first sync was the full one that sent it (an adoption sends 0 ops)
        line = rolled["first_syncs"][node]
        assert re.search(r"synced \(full\): [1-9]\d* ops", line), (node, line)


def assert_no_failed_request(rolled: dict[str, Any]) -> None:
    results = rolled["results"]
    assert set(results) == {"outside", "node", "pod"}
    for name, r in results.items():
        assert r["failed"] == 0, (name, r)
        assert r["ok"] > 20, (name, r)


def assert_failed_only_in_the_previous_releases_window(rolled: dict[str, Any], c: RealCluster) -> None:
    """The rollback's traffic: from the pod, none failed; from outside (each node's NodePort) and
    from node-2 (the ClusterIP), a failure only as a refused connection to a node within WINDOW
    seconds of that node's replacement transaction (see WINDOW)."""
    results = rolled["results"]
    assert set(results) == {"outside", "node", "pod"}
    assert results["pod"]["failed"] == 0, results["pod"]
    ips = {n.ip: n.name for n in c.nodes}
    replaced_at = {node: replacements(gens)[0].at for node, gens in rolled["generations"].items()}
    for name, r in results.items():
        assert r["ok"] > 20, (name, r)
        errors = r.get("errors", [])  # the pod's busybox loop counts only (none may fail, above)
        assert r["failed"] == len(errors) <= 3, (name, r)  # every failure listed; a few at most
        for e in errors:
            host = str(e["url"]).split("//")[1].split(":")[0].split("/")[0]
            node = ips.get(host, "node-2")  # a ClusterIP: proxied on the client's node (node-2)
            assert "ConnectionRefusedError" in e["error"], (name, e)
            assert abs(e["at"] - replaced_at[node]) < WINDOW, (name, e, replaced_at)


def test_previous_release_installed_with_its_layout(installed: dict[str, Any], cluster: RealCluster) -> None:
    c = cluster
    assert installed["image"] != c.images["nftproxy"]
    for node, pod in installed["pods"].items():
        assert w.table_layout(c, node) == OLD_LAYOUT
        assert "synced (full)" in str(first_sync(c, pod))
    outside = c.client_argv([])
    assert w.fetch_from(outside, "172.30.0.12", w.WEB_NODEPORT)["pod"].startswith("web-")


def test_helm_upgrade_under_traffic_fails_no_request(upgraded: dict[str, Any]) -> None:
    assert_no_failed_request(upgraded)


def test_helm_upgrade_replaces_each_nodes_table_in_one_transaction(upgraded: dict[str, Any]) -> None:
    assert_replaced_in_one_transaction(upgraded, OLD_LAYOUT, LAYOUT)


def test_helm_upgrade_loads_a_handover_table_around_each_replacement(upgraded: dict[str, Any]) -> None:
    """This release's replacement: the handover table created before it and deleted after it."""
    for node, gens in upgraded["handovers"].items():
        [replaced] = replacements(upgraded["generations"][node])
        assert [(set(g.created_tables()), g.deleted_tables()) for g in gens] == [
            (HANDOVERS, set()),
            (set(), HANDOVERS),
        ], (node, [g.summary() for g in gens])
        assert gens[0].id < replaced.id < gens[1].id, (node, gens[0].id, replaced.id, gens[1].id)


def test_helm_rollback_under_traffic_fails_only_in_the_previous_releases_window(
    rolled_back: dict[str, Any], cluster: RealCluster
) -> None:
    assert_failed_only_in_the_previous_releases_window(rolled_back, cluster)


def test_helm_rollback_restores_the_previous_layout_in_one_transaction(rolled_back: dict[str, Any]) -> None:
    assert_replaced_in_one_transaction(rolled_back, LAYOUT, OLD_LAYOUT)
