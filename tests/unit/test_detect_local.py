"""--detect-local-mode, as kube-proxy's local-traffic detectors (pkg/proxy/util/localdetector.go,
cmd/kube-proxy/app/server_linux.go getLocalDetectors), over the compiled table with the packet
tracer (tests/support/tracer.py): which ClusterIP traffic is masqueraded, and which sources skip
an externalTrafficPolicy Local. tests/netns/test_detect_local.py sends the same packets through
the kernel; tests/conformance/test_detect_local.py compares them with kube-proxy's.
"""

from __future__ import annotations

import argparse
import asyncio

import pytest

from nftproxy.cli.flags import add_proxy_flags, config_from_args
from nftproxy.compiler import ProxyConfig, names
from nftproxy.compiler.config import CLUSTER_CIDR, NODE_CIDR
from nftproxy.diagnose.explain import explain, render_text
from nftproxy.diagnose.tableview import view_of
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.policy_lab import node_table_tracer
from tests.support.syncer import make
from tests.support.tracer import Packet, Tracer

NODE_IP = "198.18.0.1"
NODE_POD_CIDR = "10.244.1.0/24"  # this node's Node.spec.podCIDRs
HERE = "10.244.1.5"  # a pod on this node
THERE = "10.244.2.9"  # a pod of another node (in the cluster CIDR, not this node's)
OUTSIDE = "192.0.2.7"  # a client outside the cluster
CLUSTER_IP, LB_IP = "10.96.0.10", "198.19.0.20"
LOCAL_EP, REMOTE_EP = "10.244.1.2", "10.244.2.2"

MODES = {  # mode -> its flags (the same pod-facing interfaces in every case: cbr0 on this node)
    "ClusterCIDR": ["--cluster-cidr", "10.244.0.0/16"],
    "NodeCIDR": ["--detect-local-mode", "NodeCIDR"],
    "BridgeInterface": ["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "cbr0"],
    "InterfaceNamePrefix": ["--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "veth"],
}
POD_IF = {"ClusterCIDR": "cbr0", "NodeCIDR": "cbr0", "BridgeInterface": "cbr0", "InterfaceNamePrefix": "veth3f2a"}


def _objects(pod_cidrs: tuple[str, ...] = (NODE_POD_CIDR,)) -> list[k.Obj]:
    return [
        k.node("n1", {"InternalIP": NODE_IP}, pod_cidrs=pod_cidrs),
        k.service("web", [CLUSTER_IP], [k.port(80, "http")]),
        k.endpoint_slice("web", "web", [k.endpoint(LOCAL_EP, node="n1")], [k.port(8080, "http")]),
        k.service(
            "lb-local",
            ["10.96.0.20"],
            [k.port(80, "http", node_port=30020)],
            type="LoadBalancer",
            lb_ips=[LB_IP],
            externalTrafficPolicy="Local",
            healthCheckNodePort=32020,
        ),
        k.endpoint_slice("lb-local", "lb-local", [k.endpoint(REMOTE_EP, node="n2")], [k.port(8080, "http")]),
    ]


def _tracer(mode: str, pod_cidrs: tuple[str, ...] = (NODE_POD_CIDR,)) -> Tracer:
    return node_table_tracer(_objects(pod_cidrs), ["--node-name", "n1", "--node-ip", NODE_IP, *MODES[mode]])


@pytest.mark.parametrize(
    ("mode", "here", "there", "bridge_elsewhere"),
    [  # is ClusterIP traffic masqueraded: from a pod here (on its interface), a pod of another node
        # (routed in on eth0), this node's pod address arriving on eth0?
        ("ClusterCIDR", False, False, False),
        ("NodeCIDR", False, True, False),
        ("BridgeInterface", False, True, True),
        ("InterfaceNamePrefix", False, True, True),
    ],
)
def test_clusterip_traffic_is_masqueraded_unless_the_mode_calls_it_local(
    mode: str, here: bool, there: bool, bridge_elsewhere: bool
) -> None:
    t = _tracer(mode)
    pod_here = t.trace(Packet(HERE, CLUSTER_IP, 80, iif=POD_IF[mode]))
    assert pod_here.output == f"{LOCAL_EP}:8080" and pod_here.masq is here, pod_here.describe()
    assert t.trace(Packet(THERE, CLUSTER_IP, 80, iif="eth0")).masq is there
    assert t.trace(Packet(HERE, CLUSTER_IP, 80, iif="eth0")).masq is bridge_elsewhere
    assert t.trace(Packet(OUTSIDE, CLUSTER_IP, 80, iif="eth0")).masq  # outside the cluster: always
    assert t.trace(Packet(NODE_IP, CLUSTER_IP, 80, local=True)).masq  # the node's own: never local


def test_the_prefix_matches_any_interface_it_starts_and_no_other() -> None:
    t = _tracer("InterfaceNamePrefix")
    for iif, masq in (("veth", False), ("veth0", False), ("vethabcdef012345", False), ("eth0", True), ("cbr0", True)):
        assert t.trace(Packet(HERE, CLUSTER_IP, 80, iif=iif)).masq is masq, iif


def test_a_prefix_as_long_as_an_interface_name_matches_that_name_alone() -> None:
    """nft refuses ``iifname "<15 bytes>*"`` (16 bytes, over IFNAMSIZ with its NUL); a 15-byte
    prefix can only be a whole name, so it is matched as one."""
    flags = ["--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix"]
    t = node_table_tracer(_objects(), ["--node-name", "n1", "--node-ip", NODE_IP, *flags, "abcdefghijklmno"])
    assert 'iifname != "abcdefghijklmno" jump mark-for-masquerade' in t.table.chains["cluster-1"].rules
    assert not t.trace(Packet(HERE, CLUSTER_IP, 80, iif="abcdefghijklmno")).masq
    t = node_table_tracer(_objects(), ["--node-name", "n1", "--node-ip", NODE_IP, *flags, "abcdefghijklmn"])
    assert 'iifname != "abcdefghijklmn*" jump mark-for-masquerade' in t.table.chains["cluster-1"].rules


@pytest.mark.parametrize("mode", list(MODES))
def test_local_pods_skip_an_external_traffic_policy_local_and_outside_clients_do_not(mode: str) -> None:
    """kube-proxy's "short-circuit pod traffic": a pod here reaches the LB IP of a Service whose
    only endpoint is on another node (all endpoints); an outside client is dropped (no local one)."""
    t = _tracer(mode)
    assert t.trace(Packet(HERE, LB_IP, 80, iif=POD_IF[mode])).output == f"{REMOTE_EP}:8080"
    assert t.trace(Packet(HERE, NODE_IP, 30020, iif=POD_IF[mode])).output == f"{REMOTE_EP}:8080"
    assert t.trace(Packet(OUTSIDE, LB_IP, 80, iif="eth0")).output == "DROP"


@pytest.mark.parametrize(
    ("mode", "set_name", "elements"),
    [
        ("ClusterCIDR", names.CLUSTER_CIDRS, {("10.244.0.0/16",)}),
        ("NodeCIDR", names.NODE_POD_CIDRS, {(NODE_POD_CIDR,)}),
        ("BridgeInterface", None, None),
        ("InterfaceNamePrefix", None, None),
    ],
)
def test_each_mode_declares_only_its_own_set_of_pod_sources(
    mode: str, set_name: str | None, elements: set[tuple[str, ...]] | None
) -> None:
    table = _tracer(mode).table
    declared = {n for n in names.POD_SOURCE_SETS if n in table.sets}
    assert declared == ({set_name} if set_name else set())
    if set_name:
        assert set(table.elements[set_name]) == elements


def test_the_interface_modes_write_kube_proxys_iifname_matches() -> None:
    bridge, prefix = _tracer("BridgeInterface").table, _tracer("InterfaceNamePrefix").table
    assert 'iifname != "cbr0" jump mark-for-masquerade' in bridge.chains["cluster-1"].rules
    assert 'iifname != "veth*" jump mark-for-masquerade' in prefix.chains["cluster-1"].rules
    assert any(r.startswith('iifname "veth*" ') for r in prefix.chains["external-local-0"].rules)


def test_node_cidr_without_pod_cidrs_detects_nothing_as_kube_proxys_no_op_detector() -> None:
    """No podCIDR (not allocated yet): no masquerade of ClusterIP traffic from outside, no pod
    short-circuit (kube-proxy's no-op detector; kube-proxy would wait for it, then exit)."""
    t = _tracer("NodeCIDR", pod_cidrs=())
    assert not t.trace(Packet(OUTSIDE, CLUSTER_IP, 80, iif="eth0")).masq
    assert t.trace(Packet(HERE, LB_IP, 80, iif="cbr0")).output == "DROP"
    assert set(t.table.elements[names.NODE_POD_CIDRS]) == set()


def test_node_cidr_takes_the_first_pod_cidr_of_each_family() -> None:
    pods = ("10.244.1.0/24", "fd00:10:244:1::/64", "10.245.1.0/24")
    six = node_table_tracer(_objects(pods), ["--node-name", "n1", *MODES["NodeCIDR"]], Family.IP6)
    four = node_table_tracer(_objects(pods), ["--node-name", "n1", *MODES["NodeCIDR"]])
    assert set(four.table.elements[names.NODE_POD_CIDRS]) == {("10.244.1.0/24",)}
    assert set(six.table.elements[names.NODE_POD_CIDRS]) == {("fd00:10:244:1::/64",)}


def test_masquerade_all_wins_over_any_detector() -> None:
    t = node_table_tracer(_objects(), ["--node-name", "n1", *MODES["BridgeInterface"], "--masquerade-all"])
    assert t.trace(Packet(HERE, CLUSTER_IP, 80, iif="cbr0")).masq


# -- the flags ------------------------------------------------------------------------------


def _config(*flags: str) -> ProxyConfig:
    p = argparse.ArgumentParser()
    add_proxy_flags(p)
    return config_from_args(p.parse_args(list(flags)))


def test_the_default_mode_is_cluster_cidr_and_an_empty_one_means_it() -> None:
    assert _config().detect_local_mode == CLUSTER_CIDR
    assert _config("--detect-local-mode", "").detect_local_mode == CLUSTER_CIDR


def test_the_mode_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NFTPROXY_DETECT_LOCAL_MODE", "NodeCIDR")
    assert _config().detect_local_mode == NODE_CIDR


@pytest.mark.parametrize(
    "flags",
    [
        ["--detect-local-mode", "PodCIDR"],  # no such mode
        ["--detect-local-mode", "BridgeInterface"],  # no bridge: kube-proxy's validation refuses it
        ["--detect-local-mode", "InterfaceNamePrefix"],
        ["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", 'cbr0" accept'],
        ["--detect-local-mode", "BridgeInterface", "--pod-bridge-interface", "a-name-too-long0"],
        ["--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "veth*"],
        ["--detect-local-mode", "InterfaceNamePrefix", "--pod-interface-name-prefix", "ve th"],
    ],
)
def test_a_bad_mode_or_interface_is_refused_with_the_flag_named(flags: list[str]) -> None:
    with pytest.raises((argparse.ArgumentTypeError, SystemExit)):
        _config(*flags)


def test_an_interface_flag_of_another_mode_is_ignored_as_kube_proxy_ignores_it() -> None:
    config = _config("--cluster-cidr", "10.244.0.0/16", "--pod-bridge-interface", "cbr0")
    assert config.pod_bridge_interface == ""


# -- the operator reports a NodeCIDR Node without podCIDRs, until it has them ---------------


def test_a_node_without_pod_cidrs_is_reported_in_node_cidr_mode_until_it_has_them() -> None:
    async def go() -> tuple[list[str], list[str], set[tuple[str, ...]]]:
        syncer, fake = make(proxy=_config("--node-name", "n1", *MODES["NodeCIDR"]))
        syncer.changes.mark_loaded()
        syncer.changes.node_changed(k.node("n1", {"InternalIP": NODE_IP}))
        await syncer.sync_once()
        before = [str(x) for x in syncer.changes.skipped()]
        syncer.changes.node_changed(k.node("n1", {"InternalIP": NODE_IP}, pod_cidrs=(NODE_POD_CIDR,)))
        await syncer.sync_once()
        after = [str(x) for x in syncer.changes.skipped()]
        return before, after, set(fake.tables[(Family.IP, "nftproxy")].elements[names.NODE_POD_CIDRS])

    before, after, elements = asyncio.run(go())
    assert len(before) == 1 and "no spec.podCIDRs" in before[0] and "NodeCIDR" in before[0]
    assert after == [] and elements == {(NODE_POD_CIDR,)}


def test_a_node_without_pod_cidrs_is_not_reported_in_the_other_modes() -> None:
    syncer, _ = make(proxy=_config("--node-name", "n1", *MODES["BridgeInterface"]))
    syncer.changes.node_changed(k.node("n1", {"InternalIP": NODE_IP}))
    assert syncer.changes.skipped() == []


# -- nftproxy explain names the mode's detector ---------------------------------------------


@pytest.mark.parametrize(
    ("mode", "masquerade", "short_circuit"),
    [
        ("ClusterCIDR", "masqueraded unless the source is a pod (10.244.0.0/16)", "pod sources (10.244.0.0/16)"),
        ("NodeCIDR", f"masqueraded unless the source is a pod ({NODE_POD_CIDR})", f"pod sources ({NODE_POD_CIDR})"),
        (
            "BridgeInterface",
            "masqueraded unless the source is a pod (arriving on the interface cbr0)",
            "pod traffic (arriving on the interface cbr0)",
        ),
        (
            "InterfaceNamePrefix",
            "masqueraded unless the source is a pod (arriving on any interface named veth…)",
            "pod traffic (arriving on any interface named veth…)",
        ),
    ],
)
def test_explain_names_the_modes_detector(mode: str, masquerade: str, short_circuit: str) -> None:
    table = _tracer(mode).table
    views = [view_of(table), None]
    web = render_text(explain(views, ["ip nftproxy", "ip6 nftproxy"], "default/web", None))
    lb = render_text(explain(views, ["ip nftproxy", "ip6 nftproxy"], "default/lb-local", None))
    assert masquerade in web, web
    assert f"{short_circuit}: skip the Local policy" in lb or f"{short_circuit} -> all endpoints" in lb, lb
