"""Migration from the real kube-proxy: it programs a node (iptables mode, then nftables mode),
it is stopped, `nftproxy cleanup --kube-proxy` removes what it left (and nothing else), nftproxy
takes over, and the same Services answer real connections.

Also: `nftproxy run` started next to a running kube-proxy reports it (ProxyStatus condition
KubeProxyDetected, a Warning Event on the Node) instead of silently competing; with
--cleanup-kube-proxy it removes the leftovers of a stopped kube-proxy after its own first sync
(never the rules of a running one); and a stop that leaves the node for good (its DaemonSet gone
or no longer selecting the Node) removes nftproxy's tables once another proxy's rules are there,
while any other stop keeps them.

IPVS mode cannot run here: this kernel has no IPVS module (no /proc/net/ip_vs). The IPVS part of
the cleanup runs as far as it can: it reports that the kernel has no IPVS, and removes a
`kube-ipvs0` interface (a veth stands in for kube-proxy's dummy interface: no dummy module either).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nftproxy.migration import detect
from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane, find_binary
from testkit.k8s.kubeproxy import KubeProxy
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.run import run_nftproxy

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

NODE = "mig-node"
NS = "migrate"
FLAGS = ("--min-sync-period", "0", "--status-period", "0.5s", "--sync-period", "5s")


@dataclass
class Env:
    cl: LocalCluster
    node: Node
    a: Pod
    b: Pod
    ext: Client
    workdir: Path

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cl.lab.exec(self.node, *argv, check=check)

    def answers(self) -> dict[str, set[str]]:
        lab, n = self.cl.lab, self.node

        def who(src: Node | Pod | Client, proto: str, ip: str, port: int, count: int = 12) -> set[str]:
            return {r.pod or str(r.error) for r in lab.probe(src, proto, ip, port, count=count, timeout=1.0)}

        return {
            "clusterip-from-node": who(n, "tcp", "10.96.3.10", 80),
            "clusterip-from-pod": who(self.a, "tcp", "10.96.3.10", 80),
            "nodeport-from-outside": who(self.ext, "tcp", n.ipv4, 30310),
            "udp-clusterip": who(self.b, "udp", "10.96.3.53", 53, 6),
        }


EXPECTED = {
    "clusterip-from-node": {"a", "b"},
    "clusterip-from-pod": {"a", "b"},
    "nodeport-from-outside": {"a", "b"},
    "udp-clusterip": {"a"},
}


def services(a: Pod, b: Pod) -> list[k.Obj]:
    http = [k.port(8080, "http")]
    return [
        k.service("web", ["10.96.3.10"], [k.port(80, "http", node_port=30310)], type="NodePort", namespace=NS),
        k.endpoint_slice(
            "web-1", "web", [k.endpoint(a.ipv4, node=NODE), k.endpoint(b.ipv4, node=NODE)], http, namespace=NS
        ),
        k.service("dns", ["10.96.3.53"], [k.port(53, "dns", "UDP")], namespace=NS),
        k.endpoint_slice("dns-1", "dns", [k.endpoint(a.ipv4, node=NODE)], [k.port(5353, "dns", "UDP")], namespace=NS),
    ]


@pytest.fixture(scope="module")
def env(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    try:
        find_binary("kube-proxy")
    except Exception as e:  # the binary is built by hack/k8s-tools.sh
        pytest.fail(f"kube-proxy binary missing (run hack/k8s-tools.sh): {e}", pytrace=False)
    cleanup_stale("op")
    with NetLab("op") as lab:
        cl = LocalCluster(control_plane, lab, tmp_path_factory.mktemp("migration"))
        try:
            node = cl.add_node(NODE, 1)
            a, b = (lab.add_pod(node, n, tcp=(8080,), udp=(5353,)) for n in ("a", "b"))
            ext = lab.add_client("ext", 100, via=node)
            cl.namespace(NS)
            cl.apply(*services(a, b))
            yield Env(cl, node, a, b, ext, tmp_path_factory.mktemp("kube-proxy"))
        finally:
            cl.close()


def _bystanders(env: Env) -> None:
    """Rules that are not kube-proxy's: they must survive the cleanup."""
    env.sh("nft", "add table ip keepme { chain c { type filter hook input priority 0; policy accept; }; }")
    env.sh("iptables-nft", "-t", "nat", "-N", "MY-CHAIN")
    env.sh("iptables-nft", "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", "9", "-j", "MY-CHAIN")
    env.sh("iptables-nft", "-t", "filter", "-N", "KUBE-KUBELET-CANARY")  # kubelet's, not kube-proxy's
    env.sh("iptables-legacy", "-t", "mangle", "-N", "LEGACY-KEEP")


def _check_bystanders(env: Env) -> None:
    assert "table ip keepme" in env.sh("nft", "list", "tables").stdout
    nat = env.sh("iptables-nft-save", "-t", "nat").stdout
    assert ":MY-CHAIN" in nat and "-A PREROUTING -p tcp -m tcp --dport 9 -j MY-CHAIN" in nat, nat
    assert ":KUBE-KUBELET-CANARY" in env.sh("iptables-nft-save", "-t", "filter").stdout
    assert ":LEGACY-KEEP" in env.sh("iptables-legacy-save", "-t", "mangle").stdout


def _nftproxy_takes_over(env: Env) -> None:
    env.cl.start_proxy(env.node, *FLAGS)
    try:
        eventually(lambda: env.answers() == EXPECTED or None, timeout=60, what="nftproxy serves the Services")

        def conditions() -> dict[str, Any] | None:  # the condition once the proxy has written it
            status = env.cl.proxy_status(env.node).get("status") or {}
            cond = {c["type"]: c for c in status.get("conditions", [])}
            return cond if "KubeProxyDetected" in cond else None

        cond = eventually(conditions, what="ProxyStatus with its KubeProxyDetected condition")
        assert cond["KubeProxyDetected"]["status"] == "False", cond
    finally:
        env.cl.stop_proxy(env.node)
    r = run_nftproxy("cleanup", "--netns", env.node.netns)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_migrate_from_kube_proxy(env: Env, mode: str) -> None:
    _bystanders(env)
    kp = KubeProxy(env.node.netns, NODE, env.cl.cp.kubeconfig, env.workdir / mode, node_ip=env.node.ipv4, mode=mode)
    with kp:
        kp.wait_synced(timeout=90)
        assert eventually(lambda: env.answers() == EXPECTED or None, timeout=30, what=f"kube-proxy ({mode}) serves")
    found = detect(env.node.netns)  # stopped: its rules stay, as on a real node
    assert found is not None, "kube-proxy left nothing?"
    assert found.serving, found.places  # its Services programmed (what a leaving nftproxy waits for)
    if mode == "nftables":
        assert "nftables table ip kube-proxy" in found.places
    else:
        assert any(p.startswith("iptables-nft nat") for p in found.places), found.places
    assert env.answers() == EXPECTED  # kube-proxy's leftover rules still serve (stale, unmaintained)

    r = run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "removed " in r.stdout and "this kernel has no IPVS" in r.stdout, r.stdout
    assert detect(env.node.netns) is None, r.stdout
    _check_bystanders(env)
    assert not env.answers()["clusterip-from-node"] & {"a", "b"}  # nobody proxies now: no pod answers
    again = run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns)
    assert again.returncode == 0 and "nothing of kube-proxy's found" in again.stdout, again.stdout

    _nftproxy_takes_over(env)
    _check_bystanders(env)
    env.sh("nft", "delete", "table", "ip", "keepme")
    env.sh("iptables-nft", "-t", "nat", "-F", "PREROUTING")
    env.sh("iptables-nft", "-t", "nat", "-X", "MY-CHAIN")
    env.sh("iptables-nft", "-t", "filter", "-X", "KUBE-KUBELET-CANARY")
    env.sh("iptables-legacy", "-t", "mangle", "-X", "LEGACY-KEEP")


def test_run_reports_a_running_kube_proxy(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NFTPROXY_KUBE_PROXY_CHECK_PERIOD", "3")  # inherited by `nftproxy run`
    kp = KubeProxy(env.node.netns, NODE, env.cl.cp.kubeconfig, env.workdir / "both", node_ip=env.node.ipv4,
                   mode="nftables", healthz_port=10356, metrics_port=10349)  # fmt: skip
    with kp:
        kp.wait_synced(timeout=90)
        env.cl.start_proxy(env.node, *FLAGS, healthz_port=10257, metrics_port=10250)
        try:

            def detected(reason: str) -> dict[str, str] | None:
                st = env.cl.proxy_status(env.node).get("status", {})
                cond = {c["type"]: c for c in st.get("conditions", [])}.get("KubeProxyDetected")
                return cond if cond and cond["status"] == "True" and cond["reason"] == reason else None

            cond = eventually(
                lambda: detected("KubeProxyRulesPresent") or detected("KubeProxyLeftovers"),
                timeout=30,
                what="kube-proxy reported",
            )
            assert "nftables table ip kube-proxy" in cond["message"] and "cleanup --kube-proxy" in cond["message"]
            # kube-proxy keeps programming (a new Service): at the next check it is "active"
            env.cl.apply(k.service("more", ["10.96.3.20"], [k.port(80)], namespace=NS))
            eventually(lambda: detected("KubeProxyActive"), timeout=30, what="kube-proxy seen active")
            events = json.loads(env.cl.cp.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
            mine = [e for e in events if e["involvedObject"].get("kind") == "Node" and e["reason"] == "KubeProxyActive"]
            assert mine and mine[0]["type"] == "Warning" and mine[0]["involvedObject"]["name"] == NODE
        finally:
            env.cl.stop_proxy(env.node)
            env.cl.delete("service", "more", NS)
    run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns, check=True)
    run_nftproxy("cleanup", "--netns", env.node.netns, check=True)


def test_ipvs_part_as_far_as_this_kernel_goes(env: Env) -> None:
    """No IPVS module here: the cleanup says so; the kube-ipvs0 interface (a veth standing in for
    kube-proxy's dummy one) is removed, other interfaces are not."""
    env.sh("ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "keep-peer")
    env.sh("ip", "addr", "add", "10.96.3.99/32", "dev", "kube-ipvs0")
    r = run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns)
    assert r.returncode == 0, r.stdout
    assert "removed interface kube-ipvs0" in r.stdout and "this kernel has no IPVS" in r.stdout
    links = env.sh("ip", "-o", "link").stdout
    assert "kube-ipvs0" not in links and "keep-peer" not in links  # a veth's peer goes with it
    assert "eth0" in links


def _explain(env: Env, service: str) -> dict[str, Any]:
    r = run_nftproxy(
        "explain",
        service,
        "--netns",
        env.node.netns,
        "-o",
        "json",
        "--kubeconfig",
        str(env.cl.cp.kubeconfig),
        "--node-name",
        NODE,
    )
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def test_explain_compares_the_kernel_with_the_api(env: Env) -> None:
    env.cl.start_proxy(env.node, *FLAGS)
    try:
        eventually(lambda: env.answers() == EXPECTED or None, timeout=60, what="nftproxy serves the Services")
        e = eventually(lambda: (x := _explain(env, f"{NS}/web"))["api"]["matches"] and x, what="explain: matches")
        assert e["state"] == "programmed" and {f["kind"] for f in e["frontends"]} == {"ClusterIP", "NodePort"}
    finally:
        env.cl.stop_proxy(env.node)
    # nftproxy is stopped: the API changes, the kernel does not
    http = [k.port(8080, "http")]
    env.cl.apply(k.endpoint_slice("web-1", "web", [k.endpoint(env.a.ipv4, node=NODE)], http, namespace=NS))
    e = _explain(env, f"{NS}/web")
    assert not e["api"]["matches"]
    assert any(env.b.ipv4 in x for x in e["api"]["extra"]), e["api"]  # b is still in the kernel
    assert any(r.startswith("sync pending") for r in e["api"]["reasons"]), e["api"]["reasons"]
    labelled = k.service("web", ["10.96.3.10"], [k.port(80, "http", node_port=30310)], type="NodePort", namespace=NS,
                         labels={"service.kubernetes.io/service-proxy-name": "other"})  # fmt: skip
    env.cl.apply(labelled)
    e = _explain(env, f"{NS}/web")
    assert any(r.startswith("not ours") and "'other'" in r for r in e["api"]["reasons"]), e["api"]["reasons"]
    env.cl.apply(*services(env.a, env.b))  # back as it was
    r = run_nftproxy("cleanup", "--netns", env.node.netns)
    assert r.returncode == 0, r.stderr


def test_load_balancing_annotation_through_the_operator(env: Env) -> None:
    """The annotation from the API: round-robin rotates exactly; a bad value is reported on
    ProxyStatus and as an Event on the Service, which still answers (at random)."""
    http = [k.port(8080, "http")]
    rr = k.service("rr", ["10.96.3.30"], [k.port(80, "http")], namespace=NS)
    rr["metadata"]["annotations"] = {"nftproxy.io/load-balancing": "round-robin"}
    bad = k.service("badlb", ["10.96.3.31"], [k.port(80, "http")], namespace=NS)
    bad["metadata"]["annotations"] = {"nftproxy.io/load-balancing": "weighted"}
    both = [k.endpoint(env.a.ipv4, node=NODE), k.endpoint(env.b.ipv4, node=NODE)]
    env.cl.apply(rr, bad, k.endpoint_slice("rr-1", "rr", both, http, namespace=NS),
                 k.endpoint_slice("badlb-1", "badlb", both, http, namespace=NS))  # fmt: skip
    env.cl.start_proxy(env.node, *FLAGS)
    try:
        lab = env.cl.lab

        def seq() -> list[str] | None:
            got = [str(r.pod) for r in lab.probe(env.node, "tcp", "10.96.3.30", 80, count=8, timeout=1.0)]
            return got if set(got) <= {"a", "b"} and len(set(got)) == 2 else None

        got = eventually(seq, timeout=60, what="rr served")
        assert all(got[i] != got[i + 1] for i in range(len(got) - 1)), got  # a, b, a, b, …
        assert {r.pod for r in lab.probe(env.node, "tcp", "10.96.3.31", 80, count=20, timeout=1.0)} == {"a", "b"}

        def reported() -> dict[str, Any] | None:
            st = env.cl.proxy_status(env.node).get("status", {})
            return next((x for x in st.get("skipped", []) if x["name"] == "badlb"), None)

        x = eventually(reported, what="bad value on ProxyStatus")
        assert "'weighted' is not one of random, round-robin, source-hash" in x["reason"]
        events = json.loads(env.cl.cp.kubectl("get", "events", "-n", NS, "-o", "json").stdout)["items"]
        assert any(e["involvedObject"].get("name") == "badlb" and "weighted" in e["message"] for e in events)
    finally:
        env.cl.stop_proxy(env.node)
        for name in ("rr", "badlb"):
            env.cl.delete("service", name, NS)
    run_nftproxy("cleanup", "--netns", env.node.netns, check=True)


# -- --cleanup-kube-proxy ----------------------------------------------------------------------


class Prober:
    """New connections to the web Service's ClusterIP from the node, one after the other, in a
    thread: each answer that is not one of its pods is kept (with the time it came)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.stopped = threading.Event()
        self.tries = 0
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            for r in self.env.cl.lab.probe(self.env.node, "tcp", "10.96.3.10", 80, count=4, timeout=1.0):
                self.tries += 1
                if r.pod not in ("a", "b"):
                    self.failures.append(f"{time.strftime('%H:%M:%S')}: {r.error or r.pod}")

    def __enter__(self) -> Prober:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)


def _fresh(env: Env) -> None:
    """The node's proxy log emptied and its ProxyStatus deleted: what a test reads there is its
    own proxy's."""
    (env.cl.logdir / f"nftproxy-{NODE}.log").write_bytes(b"")
    env.cl.cp.kubectl("delete", "proxystatus", NODE, "--ignore-not-found")


def _kube_proxy_condition(env: Env, status: str | None = None) -> dict[str, str] | None:
    """The node's KubeProxyDetected condition (None: not written yet, or not of that ``status``)."""
    st = env.cl.proxy_status(env.node).get("status") or {}
    found: dict[str, str] | None = {c["type"]: c for c in st.get("conditions", [])}.get("KubeProxyDetected")
    return found if found is not None and status in (None, found["status"]) else None


def _node_events(env: Env, reason: str) -> list[dict[str, Any]]:
    items = json.loads(env.cl.cp.kubectl("get", "events", "-n", "default", "-o", "json").stdout)["items"]
    return [e for e in items if e["involvedObject"].get("name") == NODE and e["reason"] == reason]


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_cleanup_kube_proxy_removes_a_stopped_kube_proxys_leftovers_after_the_first_sync(
    env: Env, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NFTPROXY_KUBE_PROXY_CHECK_PERIOD", "1")  # inherited by `nftproxy run`
    _fresh(env)
    _bystanders(env)
    kp = KubeProxy(env.node.netns, NODE, env.cl.cp.kubeconfig, env.workdir / f"left-{mode}", node_ip=env.node.ipv4,
                   mode=mode)  # fmt: skip
    with kp:
        kp.wait_synced(timeout=90)
        eventually(lambda: env.answers() == EXPECTED or None, timeout=30, what=f"kube-proxy ({mode}) serves")
    left = detect(env.node.netns)
    assert left is not None  # kube-proxy stopped: its rules stay and still answer
    with Prober(env) as prober:
        env.cl.start_proxy(env.node, *FLAGS, "--cleanup-kube-proxy")
        try:
            cond = eventually(lambda: _kube_proxy_condition(env, "False"), timeout=30, what="KubeProxyDetected False")
            assert detect(env.node.netns) is None, "kube-proxy's rules are still there"
            assert cond["reason"] in ("KubeProxyLeftoversRemoved", "NotFound"), cond
            (event,) = eventually(lambda: _node_events(env, "KubeProxyLeftoversRemoved"), what="the Event")
            assert event["type"] == "Normal", event
            removed = "nftables table ip kube-proxy" if mode == "nftables" else "iptables-nft nat: "
            assert removed in event["message"], event["message"]  # what it removed, said on the Node
            assert "removed kube-proxy's leftover rules" in env.cl.proxy_log(env.node)
            time.sleep(2)  # a few more connections with nftproxy alone
            assert env.answers() == EXPECTED
        finally:
            env.cl.stop_proxy(env.node)
    assert prober.tries > 20 and prober.failures == [], (prober.tries, prober.failures)
    _check_bystanders(env)
    for cmd in (
        ("nft", "delete", "table", "ip", "keepme"),
        ("iptables-nft", "-t", "nat", "-F", "PREROUTING"),
        ("iptables-nft", "-t", "nat", "-X", "MY-CHAIN"),
        ("iptables-nft", "-t", "filter", "-X", "KUBE-KUBELET-CANARY"),
        ("iptables-legacy", "-t", "mangle", "-X", "LEGACY-KEEP"),
    ):
        env.sh(*cmd)
    env.cl.cp.kubectl("delete", "events", "-n", "default", "--all")
    run_nftproxy("cleanup", "--netns", env.node.netns, check=True)


def test_cleanup_kube_proxy_never_removes_a_running_kube_proxys_rules(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NFTPROXY_KUBE_PROXY_CHECK_PERIOD", "1")
    _fresh(env)
    kp = KubeProxy(env.node.netns, NODE, env.cl.cp.kubeconfig, env.workdir / "running", node_ip=env.node.ipv4,
                   mode="nftables", healthz_port=10356, metrics_port=10349)  # fmt: skip
    stop = threading.Event()

    def churn() -> None:  # kube-proxy keeps programming: an endpoint comes and goes
        http = [k.port(8080, "http")]
        n = 0
        while not stop.wait(0.3):
            n += 1
            eps = [k.endpoint(env.a.ipv4, node=NODE)] + ([k.endpoint(env.b.ipv4, node=NODE)] if n % 2 else [])
            env.cl.apply(k.endpoint_slice("web-2", "web", eps, http, namespace=NS))

    with kp:
        kp.wait_synced(timeout=90)
        churner = threading.Thread(target=churn, daemon=True)
        churner.start()
        env.cl.start_proxy(env.node, *FLAGS, "--cleanup-kube-proxy", healthz_port=10257, metrics_port=10250)
        try:
            eventually(
                lambda: ((c := _kube_proxy_condition(env)) and c["reason"] == "KubeProxyActive") or None,
                timeout=30,
                what="kube-proxy seen active",
            )
            time.sleep(5)  # five more checks
            cond = _kube_proxy_condition(env)
            assert cond and cond["status"] == "True", cond
            found = detect(env.node.netns)
            assert found is not None and "nftables table ip kube-proxy" in found.places
            assert "removed kube-proxy's leftover rules" not in env.cl.proxy_log(env.node)
            assert not _node_events(env, "KubeProxyLeftoversRemoved")
        finally:
            stop.set()
            churner.join(timeout=10)
            env.cl.stop_proxy(env.node)
            env.cl.delete("endpointslice", "web-2", NS)
    run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns, check=True)
    run_nftproxy("cleanup", "--netns", env.node.netns, check=True)
    env.cl.cp.kubectl("delete", "events", "-n", "default", "--all")


# -- leaving the node for good -----------------------------------------------------------------

DS_NS = "proxy-system"
SWITCHED = "nftproxy.io/proxy"


def _our_tables(env: Env) -> set[str]:
    out = env.sh("nft", "list", "tables").stdout
    return {line.removeprefix("table ") for line in out.splitlines() if "nftproxy" in line}


def _saw_the_deletion(env: Env) -> bool:
    log = env.cl.proxy_log(env.node)
    return any(f"the DaemonSet {DS_NS}/nftproxy is {state}" in log for state in ("gone", "being deleted"))


def _label(env: Env, value: str | None) -> None:
    env.cl.cp.kubectl("label", "node", NODE, f"{SWITCHED}={value}" if value else f"{SWITCHED}-", "--overwrite")


@pytest.fixture
def daemonset(env: Env) -> Iterator[Callable[[], None]]:
    """nftproxy's DaemonSet, placed on the nodes labelled nftproxy.io/proxy=nftproxy (this node
    is); it starts the proxy as that DaemonSet's pod (no kubelet here: the test plays its part)."""
    _fresh(env)
    env.cl.namespace(DS_NS)
    env.cl.apply(k.daemonset("nftproxy", DS_NS, node_selector={"kubernetes.io/os": "linux", SWITCHED: "nftproxy"}))
    env.cl.cp.kubectl("label", "node", NODE, "kubernetes.io/os=linux", "--overwrite")
    _label(env, "nftproxy")

    def start() -> None:
        env.cl.start_proxy(env.node, *FLAGS, "--daemonset", "nftproxy", "--daemonset-namespace", DS_NS,
                           healthz_port=10257, metrics_port=10250)  # fmt: skip
        eventually(lambda: env.answers() == EXPECTED or None, timeout=60, what="nftproxy serves the Services")

    try:
        yield start
    finally:
        if NODE in env.cl.proxies:
            env.cl.stop_proxy(env.node, signal.SIGKILL)
        env.cl.cp.kubectl("delete", "daemonset", "nftproxy", "-n", DS_NS, "--ignore-not-found")
        _label(env, None)
        run_nftproxy("cleanup", "--netns", env.node.netns, check=True)
        run_nftproxy("cleanup", "--kube-proxy", "--netns", env.node.netns, check=True)


def test_a_restart_keeps_the_tables_while_the_daemonset_still_selects_the_node(
    env: Env, daemonset: Callable[[], None]
) -> None:
    daemonset()
    assert env.cl.stop_proxy(env.node) == 0
    assert _our_tables(env) == {"ip nftproxy", "ip6 nftproxy"}
    assert env.answers() == EXPECTED  # the rules stay and serve until the next pod adopts them
    log = env.cl.proxy_log(env.node)
    assert f"the nftables rules stay in place (the DaemonSet {DS_NS}/nftproxy still runs a pod on this node" in log


def test_the_node_unlabelled_nftproxy_leaves_for_good_once_kube_proxys_rules_are_there(
    env: Env, daemonset: Callable[[], None]
) -> None:
    """The way back to kube-proxy on one node: its label removed, nftproxy's pod is stopped and
    kube-proxy's starts; nftproxy waits for kube-proxy's rules, then removes its own tables. The
    Services answer throughout."""
    daemonset()
    kp = KubeProxy(env.node.netns, NODE, env.cl.cp.kubeconfig, env.workdir / "back", node_ip=env.node.ipv4,
                   mode="nftables", healthz_port=10356, metrics_port=10349)  # fmt: skip
    with Prober(env) as prober:
        _label(env, None)
        proc = env.cl.proxies[NODE]
        proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert proc.poll() is None, "nftproxy left before another proxy's rules were there"
        assert _our_tables(env) == {"ip nftproxy", "ip6 nftproxy"}
        with kp:
            assert env.cl.stop_proxy(env.node) == 0  # waits for it to exit (within 30 s)
            assert _our_tables(env) == set()
            kp.wait_synced(timeout=30)
            time.sleep(2)
    assert prober.tries > 10 and prober.failures == [], (prober.tries, prober.failures)
    log = env.cl.proxy_log(env.node)
    assert f"leaving this node for good: the DaemonSet {DS_NS}/nftproxy no longer selects this node" in log
    assert "another proxy's rules are on this node (nftables table ip kube-proxy" in log
    assert "removed table ip nftproxy, table ip6 nftproxy" in log


def test_the_daemonset_deleted_nftproxy_removes_its_tables_even_with_no_other_proxy(
    env: Env, daemonset: Callable[[], None]
) -> None:
    """helm uninstall: the DaemonSet goes first (the watch sees it), the pods are stopped after.
    With no other proxy, the tables go after the bounded wait, and the log says so."""
    daemonset()
    env.cl.cp.kubectl("delete", "daemonset", "nftproxy", "-n", DS_NS)
    eventually(lambda: _saw_the_deletion(env), what="the deletion seen by the watch")
    started = time.monotonic()
    assert env.cl.stop_proxy(env.node) == 0
    took = time.monotonic() - started
    assert _our_tables(env) == set()
    assert 14 < took < 25, took  # the bounded wait for another proxy, then the removal
    log = env.cl.proxy_log(env.node)
    assert "no other proxy's rules on this node after 15s: removing nftproxy's tables anyway" in log, log[-2000:]


def test_a_reinstall_while_the_old_proxy_waits_keeps_the_tables(env: Env, daemonset: Callable[[], None]) -> None:
    """helm uninstall, then install at once: the old proxy, waiting for another proxy's rules,
    sees the new one claim the node's tables, and leaves them to it. No connection fails."""
    daemonset()
    env.cl.cp.kubectl("delete", "daemonset", "nftproxy", "-n", DS_NS)
    eventually(lambda: _saw_the_deletion(env), what="the deletion seen by the watch")
    with Prober(env) as prober:
        old = env.cl.proxies.pop(NODE)
        old.send_signal(signal.SIGTERM)
        eventually(lambda: "leaving this node for good" in env.cl.proxy_log(env.node), what="the old one leaving")
        env.cl.apply(k.daemonset("nftproxy", DS_NS, node_selector={"kubernetes.io/os": "linux", SWITCHED: "nftproxy"}))
        daemonset()  # the new release's proxy
        assert old.wait(timeout=30) == 0
        assert _our_tables(env) == {"ip nftproxy", "ip6 nftproxy"}
        time.sleep(2)
    assert prober.tries > 10 and prober.failures == [], (prober.tries, prober.failures)
    log = env.cl.proxy_log(env.node)
    assert "another nftproxy runs on this node now: the tables are its own and stay" in log, log[-3000:]
    assert env.answers() == EXPECTED
