"""The node-by-node switch between kube-proxy and nftproxy, as the chart's README ("Switching node
by node") tells an operator to make it, command by command, on the real cluster, under traffic.

a. kube-proxy v1.37.2 as kubeadm deploys it (testkit.realcluster.upstream: its ServiceAccount,
   ConfigMap kube-system/kube-proxy, DaemonSet), in iptables mode, kubeadm's default: the web
   Services answer (ClusterIP from a node and a pod, NodePort from outside) and cluster DNS too.
b. Forward: nftproxy installed for the switched nodes only (`nodeSelector nftproxy.io/proxy`,
   `cleanupKubeProxy`, kube-proxy's ConfigMap), kube-proxy's DaemonSet kept off them (a required
   node affinity), then node after node labelled. After each node: its ProxyStatus in sync with
   KubeProxyDetected False, and kube-proxy's rules gone from the node, looked at inside it with
   `nft list ruleset` and `iptables-save` of both back ends (iptables-nft, iptables-legacy; IPv4
   and IPv6).
c. Back: `cleanupKubeProxy` turned off, then node after node unlabelled: kube-proxy returns,
   nftproxy leaves the node for good and removes its tables there; then `helm uninstall`.
d. Again from kube-proxy in nftables mode (its ConfigMap changed, its pods restarted), to the
   end: kube-proxy's DaemonSet deleted once every node runs nftproxy.
e. `helm uninstall`: no nftproxy table on any node.

Each of b, c and d runs under continuous new connections (workload.with_traffic: from outside to
both nodes' NodePorts, from node-2 and from a pod to the ClusterIP) and DNS lookups from a pod (a
new socket per lookup): not one fails. The figures (requests per client, seconds per node) are
logged.

Starts from whatever the modules before it leave (a release installed or not, CoreDNS or not) and
leaves the cluster without kube-proxy and without nftproxy, also when it fails (the ``start``
fixture's teardown).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.k8s.cluster import eventually
from testkit.realcluster import ClusterError, RealCluster, upstream
from testkit.realcluster import addons as dns
from testkit.realcluster import workload as w

pytestmark = [pytest.mark.e2e, pytest.mark.k8s, pytest.mark.netns]
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "charts" / "nftproxy" / "README.md"

LABEL = "nftproxy.io/proxy"
# The README's commands (test_the_chart_readme_gives_these_commands checks that it has them).
HELM_INSTALL = (
    "helm install nftproxy charts/nftproxy -n kube-system --set kubeProxyConfig.fromConfigMap=kube-proxy "
    "--set cleanupKubeProxy=true --set-string 'nodeSelector.nftproxy\\.io/proxy=nftproxy'"
)
KUBE_PROXY_AFFINITY = {
    "spec": {
        "template": {
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": LABEL, "operator": "NotIn", "values": ["nftproxy"]}]}
                            ]
                        }
                    }
                }
            }
        }
    }
}
PATCH_KUBE_PROXY = (
    f"kubectl -n kube-system patch daemonset kube-proxy -p '{json.dumps(KUBE_PROXY_AFFINITY, separators=(',', ':'))}'"
)
LABEL_NODE = f"kubectl label node $NODE {LABEL}=nftproxy"
UNLABEL_NODE = f"kubectl label node $NODE {LABEL}-"
GET_PROXYSTATUS = "kubectl get proxystatus $NODE"
DELETE_KUBE_PROXY = "kubectl -n kube-system delete daemonset kube-proxy"
CLEANUP_OFF = "helm upgrade nftproxy charts/nftproxy -n kube-system --reuse-values --set cleanupKubeProxy=false"
HELM_UNINSTALL = "helm uninstall nftproxy -n kube-system"
# The chart values of HELM_INSTALL; and kube-proxy's rules looked for every second instead of every
# 30 s (the cleanup comes at the second look that finds them unchanged).
VALUES: dict[str, str | bool] = {
    "kubeProxyConfig.fromConfigMap": "kube-proxy",
    "cleanupKubeProxy": True,
    "nodeSelector.nftproxy\\.io/proxy": "nftproxy",
    "extraEnv[0].name": "NFTPROXY_KUBE_PROXY_CHECK_PERIOD",
    "extraEnv[0].value": "1s",
}
# kube-proxy's iptables mode keeps a copy of kubelet's KUBE-FIREWALL chain (the localnet DROP) and
# never removes it, not even `kube-proxy --cleanup`; KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT (the
# hint of which iptables back end the node uses) are kubelet's own.
KUBELET_CHAINS = {"KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", "KUBE-FIREWALL"}
IPTABLES_SAVE = ("iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save")
DNS_POD = "migration-dns"
DNS_NAME = "kubernetes.default.svc.cluster.local"
SWITCH_TIMEOUT = 120


def log(s: str) -> None:
    print(s, flush=True)


# ---------------------------------------------------------------------------------------------- on a node


def kube_proxy_rules(c: RealCluster, node: str) -> list[str]:
    """kube-proxy's rules on NODE, seen inside it: its nftables tables and any KUBE-* chain (but
    KUBELET_CHAINS) in `nft list ruleset` and in iptables-save of both back ends and families."""
    found: list[str] = []
    ruleset = c.on_node(node, "nft", "list", "ruleset")
    found += [f"nft: table {f} kube-proxy" for f in re.findall(r"^table (ip6?) kube-proxy \{", ruleset, re.M)]
    found += sorted(
        {f"nft: chain {ch}" for ch in re.findall(r"^\s+chain (KUBE-[\w-]+) \{", ruleset, re.M)}
        - {f"nft: chain {ch}" for ch in KUBELET_CHAINS}
    )
    for tool in IPTABLES_SAVE:
        chains = set(re.findall(r"^:(KUBE-[\w-]+) ", c.on_node(node, tool), re.M)) - KUBELET_CHAINS
        found += [f"{tool}: {ch}" for ch in sorted(chains)]
    return found


def nftproxy_tables(c: RealCluster, node: str) -> list[str]:
    """nftproxy's tables on NODE (`nft list tables` inside it): nftproxy and its handover table."""
    return re.findall(r"^table (ip6? nftproxy\S*)$", c.on_node(node, "nft", "list", "tables"), re.M)


def pods_on(c: RealCluster, node: str, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of SELECTOR on NODE, terminating ones too."""
    items: list[dict[str, Any]] = c.kubectl_json(
        "get", "pods", "-n", namespace, "-l", selector, "--field-selector", f"spec.nodeName={node}"
    )["items"]
    return items


def kube_proxy_pods(c: RealCluster, node: str) -> list[dict[str, Any]]:
    return pods_on(c, node, "kube-system", "k8s-app=kube-proxy")


def nftproxy_pods(c: RealCluster, node: str) -> list[dict[str, Any]]:
    return pods_on(c, node, w.NAMESPACE, "app.kubernetes.io/name=nftproxy")


def condition_status(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def proxy_status(c: RealCluster, node: str) -> dict[str, Any] | None:
    out = c.kubectl("get", "proxystatus", node, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def released(c: RealCluster) -> bool:
    return w.RELEASE in c.helm("list", "-n", w.NAMESPACE, "-q").split()


# ---------------------------------------------------------------------------------------------- the steps


def install_nftproxy(c: RealCluster) -> None:
    """HELM_INSTALL (step 1): no node has the label yet, so no pod yet. The ProxyStatuses of
    earlier runs are deleted first: each one seen after is a new pod's."""
    c.kubectl("delete", "proxystatus", "--all", check=False)
    w.helm_upgrade(c, VALUES, "--install")
    assert not w.nftproxy_pods(c), "nftproxy runs on a node without the label"


def switched_to_nftproxy(c: RealCluster, node: str) -> dict[str, Any] | None:
    """NODE's ProxyStatus once nftproxy's pod is Ready there, kube-proxy's pod has left, and the
    ProxyStatus says in sync, kube-proxy's rules not detected (GET_PROXYSTATUS)."""
    if kube_proxy_pods(c, node):
        return None
    pods = nftproxy_pods(c, node)
    if len(pods) != 1 or not w.pod_ready(pods[0]):
        return None
    st = proxy_status(c, node)
    if not st or condition_status(st, "InSync") != "True" or condition_status(st, "KubeProxyDetected") != "False":
        return None
    return st


def switched_to_kube_proxy(c: RealCluster, node: str) -> bool:
    """kube-proxy's pod Ready on NODE, nftproxy's gone from it and its tables too, kube-proxy's
    rules in place."""
    kp = kube_proxy_pods(c, node)
    return (
        len(kp) == 1
        and w.pod_ready(kp[0])
        and not nftproxy_pods(c, node)
        and not nftproxy_tables(c, node)
        and bool(kube_proxy_rules(c, node))
    )


def to_nftproxy(c: RealCluster, node: str) -> dict[str, Any]:
    """Step 3 on NODE: LABEL_NODE, then wait for GET_PROXYSTATUS; kube-proxy's rules as found
    inside the node right after."""
    t0 = time.monotonic()
    c.kubectl("label", "node", node, f"{LABEL}=nftproxy")
    st = eventually(
        lambda: switched_to_nftproxy(c, node), timeout=SWITCH_TIMEOUT, interval=0.5, what=f"{node} on nftproxy"
    )
    seconds = time.monotonic() - t0
    left = kube_proxy_rules(c, node)
    log(f"    {node}: on nftproxy after {seconds:.1f}s, kube-proxy's rules left: {left}")
    log("    " + c.kubectl("get", "proxystatus", node).replace("\n", "\n    "))
    return {"seconds": seconds, "status": st, "kube_proxy_rules": left, "nftproxy_tables": nftproxy_tables(c, node)}


def to_kube_proxy(c: RealCluster, node: str) -> dict[str, Any]:
    """Back on NODE: UNLABEL_NODE, then wait for kube-proxy there and nftproxy's tables gone."""
    t0 = time.monotonic()
    c.kubectl("label", "node", node, f"{LABEL}-")
    eventually(
        lambda: switched_to_kube_proxy(c, node), timeout=SWITCH_TIMEOUT, interval=0.5, what=f"{node} on kube-proxy"
    )
    seconds = time.monotonic() - t0
    log(f"    {node}: back on kube-proxy after {seconds:.1f}s")
    return {"seconds": seconds, "nftproxy_tables": nftproxy_tables(c, node)}


def under_traffic(c: RealCluster, what: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """ACTION under workload.with_traffic and DNS lookups from DNS_POD; its result, the clients'."""
    out: dict[str, Any] = {}
    loop = dns.DNSLoop(c, DNS_POD, DNS_NAME, "fresh")
    t0 = time.monotonic()
    try:
        out["traffic"] = w.with_traffic(c, lambda: out.update(action()), settle=3)
    finally:
        out["traffic_dns"] = loop.stop()
    out["seconds"] = time.monotonic() - t0
    for name, r in {**out["traffic"], "dns": out["traffic_dns"]}.items():
        extra = f", {r['timeout']} timed out" if "timeout" in r else ""
        log(f"    {what}, {name}: {r['ok']} ok, {r['failed']} failed{extra} {r.get('errors', [])[:3]}")
    log(f"    {what}: {out['seconds']:.1f}s in all")
    return out


def assert_no_request_failed(phase: dict[str, Any]) -> None:
    for name, r in phase["traffic"].items():
        assert r["ok"] > 50 and r["failed"] == 0, (name, r)  # it ran all along, and lost nothing
    r = phase["traffic_dns"]
    assert r["ok"] > 50 and (r["failed"], r["timeout"]) == (0, 0), ("dns", r)


# ---------------------------------------------------------------------------------------------- fixtures


def uninstall(c: RealCluster) -> None:
    """HELM_UNINSTALL, and wait until every pod of it has exited (the DaemonSet goes at once, its
    pods remove their tables as they stop)."""
    c.helm("uninstall", w.RELEASE, "-n", w.NAMESPACE, "--wait", "--timeout", "120s")
    eventually(lambda: not any(nftproxy_pods(c, n.name) for n in c.nodes) or None, timeout=60, what="no nftproxy pod")


def no_proxy_left(c: RealCluster, route_localnet: dict[str, str]) -> None:
    """Neither nftproxy nor kube-proxy on the cluster or its nodes, no node labelled, no
    ProxyStatus; the nodes' route_localnet as it was (kube-proxy's iptables mode sets it)."""
    if released(c):
        uninstall(c)
    c.kubectl("delete", "daemonset", "kube-proxy", "-n", "kube-system", "--ignore-not-found", "--cascade=foreground")
    c.kubectl("delete", "configmap,serviceaccount", "kube-proxy", "-n", "kube-system", "--ignore-not-found")
    c.kubectl("delete", "clusterrolebinding", "kubeadm:node-proxier", "--ignore-not-found")
    eventually(
        lambda: not any(nftproxy_pods(c, n.name) or kube_proxy_pods(c, n.name) for n in c.nodes) or None,
        timeout=60,
        what="no nftproxy or kube-proxy pod",
    )
    c.kubectl("delete", "proxystatus", "--all", check=False)
    for n in c.nodes:
        c.kubectl("label", "node", n.name, f"{LABEL}-", check=False)
        c.on_node(n.name, sys.executable, "-m", "nftproxy", "cleanup")
        c.on_node(n.name, sys.executable, "-m", "nftproxy", "cleanup", "--kube-proxy")
        if n.name in route_localnet:
            c.on_node(n.name, "sysctl", "-q", "-w", f"net.ipv4.conf.all.route_localnet={route_localnet[n.name]}")


def fetch_all(c: RealCluster) -> dict[str, Any]:
    """One request each way the traffic goes, and one lookup; raises if one fails."""
    ip = w.cluster_ip(c, "web")
    answers: dict[str, Any] = {
        f"outside -> {n.name}:{w.WEB_NODEPORT}": w.fetch_from(c.client_argv([]), n.ip, w.WEB_NODEPORT)["pod"]
        for n in c.nodes
    }
    answers["node-2 -> ClusterIP"] = w.fetch_from(c.node_net_argv("node-2", []), ip, 80)["pod"]
    answers["client pod -> ClusterIP"] = w.pod_get(c, "client", f"http://{ip}/")["pod"]
    answers["dns"] = dns.dns_query(c, DNS_POD, DNS_NAME)
    return answers


def answered(c: RealCluster) -> dict[str, Any] | None:
    try:
        answers = fetch_all(c)
    except (subprocess.SubprocessError, ClusterError, ValueError):  # not yet programmed
        return None
    return answers if answers["dns"]["result"] == "ok" else None


@pytest.fixture(scope="module")
def start(cluster: RealCluster) -> Iterator[dict[str, Any]]:
    """a: kube-proxy in iptables mode, as kubeadm deploys it, and nothing else; the web workload,
    CoreDNS and a DNS client pod. kube-proxy first: an nftproxy release left by an earlier module
    then leaves its nodes to it. Afterwards (also on a failure): no proxy at all."""
    c = cluster
    t0 = time.monotonic()
    route_localnet = {
        n.name: c.on_node(n.name, "sysctl", "-n", "net.ipv4.conf.all.route_localnet").strip() for n in c.nodes
    }
    try:
        c.kubectl(
            "delete", "daemonset", "kube-proxy", "-n", "kube-system", "--ignore-not-found", "--cascade=foreground"
        )
        for n in c.nodes:
            c.kubectl("label", "node", n.name, f"{LABEL}-", check=False)
        upstream.install_proxy(c, "kube-proxy", log, mode="iptables")
        no_nftproxy_t0 = time.monotonic()
        if released(c):
            uninstall(c)
        for n in c.nodes:
            c.on_node(n.name, sys.executable, "-m", "nftproxy", "cleanup")
        log(f"    earlier release removed in {time.monotonic() - no_nftproxy_t0:.1f}s")
        c.kubectl("apply", "-f", "-", input=w.web_manifests())
        c.kubectl(
            "apply", "-f", "-", input=dns.client_pod_manifest(DNS_POD, "node-2", c.images["nftproxy"])
        )  # fmt: skip
        dns.install_coredns(c)
        c.kubectl("rollout", "status", "deployment/web", "--timeout=120s")
        c.kubectl("wait", "--for=condition=Ready", "pod/client", f"pod/{DNS_POD}", "--timeout=120s")
        answers = eventually(lambda: answered(c), timeout=60, interval=0.5, what="the Services through kube-proxy")
        log(f"    kube-proxy (iptables mode) serves: {answers} ({time.monotonic() - t0:.1f}s)")
        yield {
            "answers": answers,
            "rules": {n.name: kube_proxy_rules(c, n.name) for n in c.nodes},
            "tables": {n.name: nftproxy_tables(c, n.name) for n in c.nodes},
            "ruleset": {n.name: c.on_node(n.name, "nft", "list", "ruleset") for n in c.nodes},
            "config": c.kubectl_json("get", "configmap", "kube-proxy", "-n", "kube-system")["data"]["config.conf"],
        }
    finally:
        c.kubectl("delete", "pod", DNS_POD, "--wait=false", "--ignore-not-found")
        no_proxy_left(c, route_localnet)


@pytest.fixture(scope="module")
def forward(start: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """b: steps 1-3 of the README, under traffic."""
    c = cluster

    def steps() -> dict[str, Any]:
        t0 = time.monotonic()
        install_nftproxy(c)  # 1
        c.kubectl("patch", "daemonset", "kube-proxy", "-n", "kube-system", "-p", json.dumps(KUBE_PROXY_AFFINITY))  # 2
        c.kubectl("rollout", "status", "daemonset/kube-proxy", "-n", "kube-system", "--timeout=120s")
        prepared = time.monotonic() - t0
        log(f"    nftproxy installed, kube-proxy's DaemonSet patched and rolled out: {prepared:.1f}s")
        return {"prepared_s": prepared, "nodes": {n.name: to_nftproxy(c, n.name) for n in c.nodes}}  # 3

    return under_traffic(c, "kube-proxy (iptables) -> nftproxy", steps)


@pytest.fixture(scope="module")
def back(forward: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """c: cleanupKubeProxy off (CLEANUP_OFF), then back to kube-proxy node by node, under traffic;
    then helm uninstall (no pod left). With cleanupKubeProxy on, a leaving nftproxy pod kept
    checking after its SIGTERM and removed the rules of the kube-proxy that had just arrived, then
    its own tables: the node's NodePorts were refused until kube-proxy's next resync."""
    c = cluster
    t0 = time.monotonic()
    c.helm(
        "upgrade", w.RELEASE, str(w.CHART), "-n", w.NAMESPACE, "--reuse-values", "--set", "cleanupKubeProxy=false",
        "--wait", "--timeout", "180s",
    )  # fmt: skip
    c.kubectl("rollout", "status", "-n", w.NAMESPACE, "daemonset/nftproxy", "--timeout=180s")
    log(f"    cleanupKubeProxy off, rolled out: {time.monotonic() - t0:.1f}s")
    out = under_traffic(
        c, "nftproxy -> kube-proxy (iptables)", lambda: {"nodes": {n.name: to_kube_proxy(c, n.name) for n in c.nodes}}
    )
    uninstall(c)
    out["tables_after_uninstall"] = {n.name: nftproxy_tables(c, n.name) for n in c.nodes}
    return out


def on_nftables_mode(c: RealCluster) -> dict[str, list[str]] | None:
    """Each node's kube-proxy rules once they are nftables mode's alone (its `ip kube-proxy` table,
    the iptables mode's chains removed by kube-proxy's start in nftables mode)."""
    rules = {n.name: kube_proxy_rules(c, n.name) for n in c.nodes}
    wanted = ["nft: table ip kube-proxy", "nft: table ip6 kube-proxy"]
    return rules if all(r == wanted for r in rules.values()) else None


@pytest.fixture(scope="module")
def from_nftables_mode(back: dict[str, Any], cluster: RealCluster) -> dict[str, Any]:
    """d: kube-proxy switched to nftables mode (its ConfigMap, its pods restarted), then to
    nftproxy node by node, under traffic, and kube-proxy's DaemonSet deleted (step 4)."""
    c = cluster
    t0 = time.monotonic()
    upstream.install_proxy(c, "kube-proxy", log, mode="nftables")
    c.kubectl("rollout", "restart", "daemonset/kube-proxy", "-n", "kube-system")
    c.kubectl("rollout", "status", "daemonset/kube-proxy", "-n", "kube-system", "--timeout=120s")
    rules = eventually(lambda: on_nftables_mode(c), timeout=60, interval=0.5, what="kube-proxy in nftables mode")
    eventually(lambda: answered(c), timeout=60, interval=0.5, what="the Services through kube-proxy (nftables)")
    log(f"    kube-proxy in nftables mode after {time.monotonic() - t0:.1f}s: {rules}")

    def steps() -> dict[str, Any]:
        install_nftproxy(c)  # 1 (the DaemonSet kept its affinity: 2)
        nodes = {n.name: to_nftproxy(c, n.name) for n in c.nodes}  # 3
        c.kubectl("delete", "daemonset", "kube-proxy", "-n", "kube-system", "--wait")  # 4
        return {"nodes": nodes}

    out = under_traffic(c, "kube-proxy (nftables) -> nftproxy", steps)
    out["kube_proxy_rules_before"] = rules
    return out


# ---------------------------------------------------------------------------------------------- tests


def test_the_chart_readme_gives_these_commands() -> None:
    text = re.sub(r"\\\n\s*", "", README.read_text())  # continued lines joined
    section = text.partition("### Switching node by node")[2].partition("\n### ")[0]
    assert section, "charts/nftproxy/README.md has no section 'Switching node by node'"
    commands = (HELM_INSTALL, PATCH_KUBE_PROXY, LABEL_NODE, GET_PROXYSTATUS, DELETE_KUBE_PROXY, CLEANUP_OFF)
    for command in (*commands, UNLABEL_NODE):
        assert " ".join(command.split()) in " ".join(section.split()), command
    assert HELM_UNINSTALL in text


def test_kube_proxy_in_iptables_mode_serves_the_services_at_the_start(start: dict[str, Any]) -> None:
    assert "mode: iptables" in start["config"]
    for node, rules in start["rules"].items():
        # iptables mode: its chains in iptables-nft (the image's back end), no nftables table
        assert "iptables-nft-save: KUBE-SERVICES" in rules, (node, rules)
        assert not [r for r in rules if r.startswith("nft: table")], (node, rules)
        assert start["tables"][node] == [], node
    assert start["answers"]["dns"]["result"] == "ok"


def test_switching_node_by_node_from_iptables_mode_fails_no_request(forward: dict[str, Any]) -> None:
    for node, r in forward["nodes"].items():
        assert r["kube_proxy_rules"] == [], node  # gone, seen inside the node
        assert r["nftproxy_tables"] == ["ip nftproxy", "ip6 nftproxy"], node
    assert_no_request_failed(forward)


def test_switching_back_node_by_node_removes_nftproxys_tables_and_fails_no_request(back: dict[str, Any]) -> None:
    for node, r in back["nodes"].items():
        assert r["nftproxy_tables"] == [], node
    assert_no_request_failed(back)
    assert back["tables_after_uninstall"] == {"node-1": [], "node-2": []}


def test_switching_from_nftables_mode_fails_no_request(from_nftables_mode: dict[str, Any]) -> None:
    for node, r in from_nftables_mode["nodes"].items():
        assert r["kube_proxy_rules"] == [], node
        assert r["nftproxy_tables"] == ["ip nftproxy", "ip6 nftproxy"], node
    assert_no_request_failed(from_nftables_mode)


def test_helm_uninstall_leaves_no_nftproxy_table(from_nftables_mode: dict[str, Any], cluster: RealCluster) -> None:
    c = cluster
    t0 = time.monotonic()
    uninstall(c)
    log(f"    helm uninstall, every pod gone: {time.monotonic() - t0:.1f}s")
    assert {n.name: nftproxy_tables(c, n.name) for n in c.nodes} == {"node-1": [], "node-2": []}
    assert {n.name: kube_proxy_rules(c, n.name) for n in c.nodes} == {"node-1": [], "node-2": []}
