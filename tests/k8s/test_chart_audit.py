"""The chart's ClusterRole and Role grant exactly what nftproxy calls, proven from the apiserver's
audit log.

A control plane of its own logs every request (audit policy: Metadata level). The chart is
installed with helm; `nftproxy run` then lives a node's life with a token of the chart's
ServiceAccount (start before its Node exists, first sync, the Node appearing, Service and
EndpointSlice changes, a skipped object and kube-proxy's table on the node, so both kinds of
Event, ProxyStatus writes, its release's DaemonSet watched, SIGTERM and that DaemonSet read
again), and `nftproxy verify` and `nftproxy explain --kubeconfig` run with the same identity,
as a user would inside the pod. The (apiGroup, resource, verb) set that identity used, read
from the audit log, must equal the set the release's ClusterRole and Role grant, read from
`helm get manifest`: nothing granted that is never used, nothing used that
is refused (no 403). Non-resource requests (API discovery) must be what every authenticated
identity may do anyway.
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.k8s import objects as k
from testkit.k8s.cluster import LocalCluster, eventually
from testkit.k8s.controlplane import ControlPlane
from testkit.lab.netlab import NetLab, Node, cleanup_stale
from tests.k8s.helmchart import Helm, Release, install
from tests.support.controlplanes import started_control_plane
from tests.support.run import run_nftproxy

pytestmark = [pytest.mark.k8s, pytest.mark.netns]

Grant = tuple[str, str, str]  # (apiGroup, resource or resource/subresource, verb)
CIDRS = ("--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48")

# Granted, yet not exercised by the run below: each with the reason it stays. Empty: every verb
# the chart grants is used by the life this test plays.
RARE: dict[Grant, str] = {}


@pytest.fixture(scope="module")
def audited() -> Iterator[ControlPlane]:
    """A control plane of this module's own, logging every request (its log holds only this test's)."""
    yield from started_control_plane(audit=True)


@pytest.fixture(scope="module")
def release(audited: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    helm = Helm(tmp_path_factory.mktemp("helm-audit"), audited.kubeconfig)
    rel = install(audited, helm, f"au-{uuid.uuid4().hex[:5]}", f"nftproxy-au-{uuid.uuid4().hex[:5]}")
    try:
        yield rel
    finally:
        rel.uninstall()


def granted_by_release(release: Release) -> set[Grant]:
    """What the release's ClusterRoles and Roles grant, from the manifest helm installed."""
    manifest = release.helm("get", "manifest", release.name, "-n", release.namespace).stdout
    objs = [o for o in yaml.safe_load_all(manifest) if o]
    roles = [o for o in objs if o["kind"] in ("ClusterRole", "Role")]
    assert roles, "the release has no ClusterRole or Role"
    out: set[Grant] = set()
    for role in roles:
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), rule
                        out.add((group, resource, verb))
    return out


def granted_to_everyone(cp: ControlPlane) -> tuple[set[Grant], list[str]]:
    """What the apiserver's own bindings give every authenticated identity (system:discovery,
    system:basic-user, ...): resource grants, and non-resource URL patterns."""
    bindings = json.loads(cp.kubectl("get", "clusterrolebindings", "-o", "json").stdout)["items"]
    everyone = {"system:authenticated", "system:serviceaccounts"}
    names = {
        b["roleRef"]["name"]
        for b in bindings
        if any(s.get("kind") == "Group" and s.get("name") in everyone for s in b.get("subjects") or [])
    }
    resources: set[Grant] = set()
    urls: list[str] = []
    for name in sorted(names):
        role = json.loads(cp.kubectl("get", "clusterrole", name, "-o", "json").stdout)
        for rule in role.get("rules") or []:
            urls += rule.get("nonResourceURLs") or []
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    resources.update((group, resource, verb) for verb in rule["verbs"])
    return resources, urls


def used_by(events: list[dict[str, Any]], username: str) -> tuple[set[Grant], set[str], list[str]]:
    """From audit events: (what USERNAME asked for, the non-resource paths it read, its refusals)."""
    used: set[Grant] = set()
    paths: set[str] = set()
    refused: list[str] = []
    for e in events:
        if e["user"]["username"] != username:
            continue
        ref = e.get("objectRef")
        if ref and ref.get("resource"):
            resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            used.add((ref.get("apiGroup", ""), resource, e["verb"]))
        else:
            paths.add(e["requestURI"].split("?", 1)[0])
        if (e.get("responseStatus") or {}).get("code") == 403:
            refused.append(f"{e['verb']} {e['requestURI']}: 403")
    return used, paths, refused


def show(grants: set[Grant]) -> str:
    return "\n".join(f"  {g or 'core'} {r} {v}" for g, r, v in sorted(grants)) or "  (none)"


def nftproxy(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_nftproxy(*argv, timeout=120)


def nft(node: Node, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", node.netns, "nft", *args], check=True, capture_output=True)


def live_a_life(cl: LocalCluster, lab: NetLab, kubeconfig: Path, release: Release) -> subprocess.CompletedProcess[str]:
    """`nftproxy run` with KUBECONFIG's identity through what a node's proxy does (its release's
    DaemonSet watched, and read at the stop, as the chart runs it), then verify and explain with
    the same identity; explain's result (checked after the audit log's verdict)."""
    cp = cl.cp
    node = lab.add_node("audit-node", 1)  # its Node object comes later: the ProxyStatus gets its owner then
    pod = lab.add_pod(node, "p", tcp=(8080,))
    pod2 = lab.add_pod(node, "q", tcp=(8080,))
    ns = cl.namespace("audit")
    cl.apply(
        k.service("web", ["10.96.3.10"], [k.port(80, "http")], namespace=ns),
        k.endpoint_slice("web-x", "web", [k.endpoint(pod.ipv4)], [k.port(8080, "http")], namespace=ns),
        # no Service "orphan": the slice is skipped, with an Event
        k.endpoint_slice("orphan-x", "orphan", [k.endpoint(pod.ipv4)], [k.port(8080)], namespace=ns),
    )
    # kube-proxy's table on the node: the proxy reports it (condition, and an Event on the Node)
    nft(node, "add", "table", "ip", "kube-proxy")
    daemonset = ("--daemonset", release.fullname, "--daemonset-namespace", release.namespace)
    cl.start_proxy(node, "--min-sync-period", "0", "--status-period", "0.3s", *daemonset, kubeconfig=kubeconfig)

    # First sync and the first ProxyStatus write (created without an owner: no Node yet)
    eventually(lambda: {r.pod for r in lab.probe(node, "tcp", "10.96.3.10", 80)} == {"p"}, what="web served")
    eventually(lambda: cl.proxy_status(node).get("status", {}).get("skippedCount"), what="ProxyStatus written")

    # The Node appears (the proxy's field-selected watch): the ProxyStatus gets its owner reference
    cl.register_node(node)
    st = eventually(lambda: cl.proxy_status(node).get("metadata", {}).get("ownerReferences"), timeout=30, what="owner")
    assert st[0]["kind"] == "Node"
    services = eventually(lambda: cl.proxy_status(node).get("status", {}).get("services"), what="services counted")

    # Changes arrive by the watches: a new Service, a changed slice, a deleted Service
    cl.apply(
        k.service("db", ["10.96.3.11"], [k.port(5432, "pg")], namespace=ns),
        k.endpoint_slice("db-x", "db", [k.endpoint(pod2.ipv4)], [k.port(8080, "pg")], namespace=ns),
        k.endpoint_slice(
            "web-x", "web", [k.endpoint(pod.ipv4), k.endpoint(pod2.ipv4)], [k.port(8080, "http")], namespace=ns
        ),
    )
    eventually(lambda: {r.pod for r in lab.probe(node, "tcp", "10.96.3.11", 5432)} == {"q"}, what="db served")
    eventually(
        lambda: {r.pod for r in lab.probe(node, "tcp", "10.96.3.10", 80, count=16)} == {"p", "q"},
        what="web on both pods",
    )
    cl.delete("service", "db", ns)
    eventually(lambda: cl.proxy_status(node).get("status", {}).get("services") == services, what="db gone")

    def events(namespace: str, involved: str) -> list[str] | None:
        items = json.loads(cp.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        return [e["reason"] for e in items if e["involvedObject"]["name"] == involved] or None

    assert eventually(lambda: events(ns, "orphan-x"), what="Event for the orphan slice") == ["InvalidObject"]
    assert eventually(lambda: events("default", node.name), what="kube-proxy Event") == ["KubeProxyRulesPresent"]

    # What a user runs inside the pod, with the pod's token
    verify = ["verify", "--node-name", node.name, "--netns", node.netns, "--kubeconfig", str(kubeconfig), *CIDRS]
    r = nftproxy(*verify, "--wait", "20")
    assert r.returncode == 0 and "in sync" in r.stdout, r
    explain = ["explain", f"{ns}/web", "--node-name", node.name, "--netns", node.netns, *CIDRS]
    explained = nftproxy(*explain, "--kubeconfig", str(kubeconfig), "-o", "json")

    assert cl.stop_proxy(node) == 0
    log = cl.proxy_log(node)
    assert "Forbidden" not in log and "Traceback" not in log, log[-3000:]  # a 403: the audit log tells
    return explained


def test_cluster_role_is_what_nftproxy_calls(audited: ControlPlane, release: Release, tmp_path: Path) -> None:
    cp = audited
    kubeconfig = release.token_kubeconfig(tmp_path / "sa.kubeconfig")
    username = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    cleanup_stale()
    with NetLab("au") as lab:
        cl = LocalCluster(cp, lab, tmp_path)
        try:
            explained = live_a_life(cl, lab, kubeconfig, release)
        finally:
            cl.close()

    granted = granted_by_release(release)
    everyone, urls = granted_to_everyone(cp)
    used, paths, refused = used_by(cp.read_audit_log(), username)
    assert used, f"no request of {username} in the audit log"
    unused = granted - used - set(RARE)
    denied = used - granted - everyone
    stray = sorted(p for p in paths if not any(fnmatch.fnmatchcase(p, u) for u in urls))
    summary = (
        f"used by {username}:\n{show(used)}\ngranted by the chart:\n{show(granted)}\n"
        f"granted, never used:\n{show(unused)}\nused, not granted:\n{show(denied)}\n"
        f"refused: {refused}\nnon-resource paths: {sorted(paths)}"
    )
    assert not refused, summary
    assert not denied, summary
    assert not unused, summary
    assert not stray, f"non-resource requests beyond what every identity may do: {stray}\n{summary}"
    assert set(RARE) <= granted, "an allow-listed grant the chart no longer has"
    assert explained.returncode == 0, explained
    assert json.loads(explained.stdout)["api"] is not None, explained.stdout
