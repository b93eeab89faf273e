"""Upstream's own e2e suite (`e2e.test`, built here at the pinned Kubernetes version) on the real
cluster, with nftproxy (the chart) or the real kube-proxy (a DaemonSet, the reference) as the only
Service proxy.

    python -m testkit.realcluster.upstream [--proxy nftproxy|kube-proxy] [--selection conformance|make-test|full]
                                           [--focus REGEX] [--localhost-nodeports]
                                           [--report-dir DIR] [--cluster NAME] [--compare A.json B.json]

* The cluster: testkit.realcluster (two kubelet nodes, CoreDNS behind kube-dns, the `kubernetes`
  Service with a real endpoint); its own unless ``--cluster`` names a running one.
* The images the framework names (``e2e.test --list-images``: agnhost, busybox, ...), built here
  by hack/e2e-tools.sh + hack/images.sh, imported into each node's containerd under those names.
* The selection: ``conformance`` = every ``[sig-network]`` ``[Conformance]`` test; ``make-test``
  = those and "KubeProxy should set TCP CLOSE_WAIT timeout" (the node's conntrack settings); ``full`` =
  every ``[sig-network]`` test but those in hack/e2e-skips.txt, each skip with its reason (what this
  lab cannot provide: a cloud LoadBalancer, SSH to nodes, ...). Tests run one at a time (``[Serial]``
  ones are then serial too).
* The report: a table (test, result, seconds), the JUnit file (DIR/junit_01.xml), DIR/results.json,
  and a last line ``upstream e2e: N passed, M failed, K skipped``. ``--compare`` prints two runs'
  results side by side (e.g. kube-proxy's and nftproxy's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from nftproxy.compiler import features
from testkit.k8s import versions
from testkit.k8s.controlplane import find_binary
from testkit.k8s.kubeproxy import kube_proxy_config
from testkit.realcluster import addons
from testkit.realcluster import images as imagelib
from testkit.realcluster import workload as w
from testkit.realcluster.cluster import ROOT, ClusterError, RealCluster
from testkit.realcluster.node import CLUSTER_CIDRS

SKIPS_FILE = ROOT / "hack" / "e2e-skips.txt"
SELECTIONS = {
    # [FutureConformance]: Conformance in a later release (1.38's named targetPorts test: 1.41),
    # which the release notes ask Service proxies to pass now
    "conformance": r"\[sig-network\].*\[(Future)?Conformance\]",
    # make test's: the Conformance tests and kube-proxy's node settings (conntrack sysctls)
    "make-test": r"\[sig-network\].*\[(Future)?Conformance\]"
    r"|\[sig-network\] KubeProxy should set TCP CLOSE_WAIT timeout",
    "full": r"\[sig-network\]",
}
# localhost NodePorts on (both proxies): the gate (off by default in 1.37) and nodePortAddresses
LOCALHOST_NODEPORTS = ["primary", "localhost"]
LOCALHOST_GATE = {features.LOCALHOST_NODEPORTS: True}
Log = Callable[[str], None]
NODE_NAME = {"fieldPath": "spec.nodeName"}


# ---------------------------------------------------------------------------------------------- selection


def read_skips(path: Path = SKIPS_FILE) -> list[tuple[str, str]]:
    """(regex, reason) of each skip: a ``# reason`` comment, then the patterns it covers, one per
    line, up to the next blank line. A pattern without a reason is an error."""
    skips: list[tuple[str, str]] = []
    reason = ""
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line:
            reason = ""
        elif line.startswith("#"):
            reason = (reason + " " + line.lstrip("#").strip()).strip()
        else:
            if not reason:
                raise ValueError(f"{path}:{n}: skip {line!r} has no reason (a # comment above it)")
            re.compile(line)
            skips.append((line, reason))
    return skips


def skip_regex(selection: str, skips: Sequence[tuple[str, str]]) -> str:
    return "" if selection != "full" else "|".join(f"(?:{p})" for p, _ in skips)


# ---------------------------------------------------------------------------------------------- the proxies


def kube_proxy_manifests(
    cluster: RealCluster, image: str, *, mode: str = "nftables", localhost_nodeports: bool = False
) -> str:
    """kubeadm's kube-proxy addon: a ServiceAccount bound to system:node-proxier, the config and a
    kubeconfig (the ServiceAccount's token, the apiserver on the node's 127.0.0.1 forwarder, as
    nftproxy's chart reaches it) in a ConfigMap, a hostNetwork privileged DaemonSet. MODE:
    kube-proxy's, ``nftables`` or ``iptables`` (kubeadm's default; its ``iptables`` section then
    as kubeadm leaves it: localhostNodePorts unset, i.e. on)."""
    cfg = kube_proxy_config(
        node_name="",
        kubeconfig="/var/lib/kube-proxy/kubeconfig.conf",
        cluster_cidrs=list(CLUSTER_CIDRS),
        healthz_bind_address="0.0.0.0:10256",
        metrics_bind_address="127.0.0.1:10249",
        mode=mode,
        min_sync_period="1s",  # kube-proxy's defaults
        sync_period="30s",
        nodeport_addresses=LOCALHOST_NODEPORTS if localhost_nodeports else None,
        extra={"featureGates": LOCALHOST_GATE} if localhost_nodeports else None,
    )
    if mode == "iptables":
        del cfg["iptables"]["localhostNodePorts"]
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "default",
                "cluster": {
                    "server": f"https://127.0.0.1:{cluster.apiserver_port}",
                    "certificate-authority": f"{sa}/ca.crt",
                },
            }
        ],
        "users": [{"name": "default", "user": {"tokenFile": f"{sa}/token"}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default", "namespace": "default"}}],
        "current-context": "default",
    }
    ns = {"namespace": "kube-system"}
    labels = {"k8s-app": "kube-proxy"}
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kube-proxy", **ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "kubeadm:node-proxier"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-proxier"},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", **ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", **ns},
            "data": {"config.conf": yaml.safe_dump(cfg), "kubeconfig.conf": yaml.safe_dump(kubeconfig)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "kube-proxy", "labels": labels, **ns},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "kube-proxy",
                        "hostNetwork": True,
                        "priorityClassName": "system-node-critical",
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "kube-proxy",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "command": [
                                    "/usr/local/bin/kube-proxy",
                                    "--config=/var/lib/kube-proxy/config.conf",
                                    "--hostname-override=$(NODE_NAME)",
                                ],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                                ],
                                "securityContext": {"privileged": True},
                                "volumeMounts": [{"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"}],
                            }
                        ],
                        "volumes": [{"name": "kube-proxy", "configMap": {"name": "kube-proxy"}}],
                    },
                },
            },
        },
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def kube_proxy_image(log: Log) -> tuple[str, str]:
    """(ref, archive) of the kube-proxy image (hack/kube-proxy-image.sh, cached)."""
    p = subprocess.run(
        ["bash", str(ROOT / "hack" / "kube-proxy-image.sh")], capture_output=True, text=True, check=False
    )
    for line in p.stdout.splitlines():
        log("    " + line)
    if p.returncode != 0:
        raise ClusterError(f"hack/kube-proxy-image.sh failed: {(p.stderr or p.stdout)[-1500:]}")
    info = json.loads((imagelib.images_dir() / f"kube-proxy-{versions.current()}.json").read_text())
    return str(info["ref"]), str(info["archive"])


def install_proxy(
    cluster: RealCluster, proxy: str, log: Log, *, localhost_nodeports: bool = False, mode: str = "nftables"
) -> None:
    """``localhost_nodeports``: both proxies with ``nodePortAddresses: [primary, localhost]`` and
    the gate KubeProxyNFTablesLocalhostNodePorts on (its default from 1.38). ``mode``: kube-proxy's
    (nftables or iptables); applied over an installed kube-proxy, its ConfigMap changes (the
    DaemonSet's pods take it when they restart) and what others added to the DaemonSet stays."""
    if proxy == "nftproxy":
        values: dict[str, str | bool] | None = None
        if localhost_nodeports:
            values = {"nodePortAddresses": "{" + ",".join(LOCALHOST_NODEPORTS) + "}"}
            values.update({f"featureGates.{g}": on for g, on in LOCALHOST_GATE.items()})
        w.helm_install(cluster, values)
        return
    ref, archive = kube_proxy_image(log)
    cluster.import_image(ref, archive)
    manifests = kube_proxy_manifests(cluster, ref, mode=mode, localhost_nodeports=localhost_nodeports)
    cluster.kubectl("apply", "-f", "-", input=manifests)
    cluster.kubectl("rollout", "status", "daemonset/kube-proxy", "-n", "kube-system", "--timeout=180s", timeout=210)


# ---------------------------------------------------------------------------------------------- the run


@dataclass
class Case:
    name: str
    result: str  # passed | failed | skipped
    seconds: float
    message: str = ""


def parse_junit(path: Path, focus: str) -> list[Case]:
    """The cases of FOCUS in a ginkgo JUnit report (the others are there too, skipped by focus)."""
    rx = re.compile(focus)
    cases: list[Case] = []
    for tc in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 (our own e2e.test's report)
        name = tc.get("name", "")
        if not rx.search(name):
            continue
        failure = tc.find("failure")
        if failure is None:
            failure = tc.find("error")
        skipped = tc.find("skipped")
        if failure is not None:
            result, msg = "failed", (failure.get("message") or failure.text or "")[:500]
        elif skipped is not None:
            result, msg = "skipped", (skipped.get("message") or "")[:300]
        else:
            result, msg = "passed", ""
        cases.append(Case(re.sub(r"^\[It\] ", "", name), result, float(tc.get("time") or 0), msg))
    return cases


def summary_line(cases: Sequence[Case]) -> str:
    n = {r: sum(c.result == r for c in cases) for r in ("passed", "failed", "skipped")}
    return f"upstream e2e: {n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"


def table(cases: Sequence[Case]) -> str:
    lines = ["test | result | seconds", "---|---|---"]
    lines += [f"{c.name} | {c.result} | {c.seconds:.1f}" for c in sorted(cases, key=lambda c: c.name)]
    return "\n".join(lines)


def list_images() -> list[str]:
    out = subprocess.run([str(find_binary("e2e.test")), "--list-images"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def import_e2e_images(cluster: RealCluster, log: Log) -> None:
    wanted = imagelib.build_e2e(log)
    for ref, archive in wanted.items():
        cluster.import_image(ref, archive)
    log(f"    {len(wanted)} e2e images in every node's containerd")


def run_e2e(cluster: RealCluster, selection: str, report_dir: Path, log: Log, *, extra_focus: str = "") -> list[Case]:
    """e2e.test against CLUSTER (the proxy and CoreDNS installed): the cases of the selection."""
    focus = extra_focus or SELECTIONS[selection]
    skip = skip_regex(selection, read_skips())
    report_dir = report_dir.resolve()  # e2e.test runs in it: a relative one would nest
    report_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(find_binary("e2e.test")),
        "--provider=local",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--kubectl-path={find_binary('kubectl')}",
        f"--ginkgo.focus={focus}",
        *([f"--ginkgo.skip={skip}"] if skip else []),
        "--ginkgo.no-color",
        "--ginkgo.silence-skips",
        "--ginkgo.timeout=6h",
        "--disable-log-dump=true",
        f"--report-dir={report_dir}",
    ]
    log(f"    {' '.join(argv)}")
    t0 = time.monotonic()
    with open(report_dir / "e2e.log", "w") as out:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        p = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=report_dir, env=env, check=False)
    log(f"    e2e.test exited {p.returncode} after {time.monotonic() - t0:.0f}s (log: {report_dir / 'e2e.log'})")
    junit = report_dir / "junit_01.xml"
    if not junit.exists():
        raise ClusterError(f"e2e.test wrote no {junit}; {report_dir / 'e2e.log'}:\n" + _tail(report_dir / "e2e.log"))
    cases = parse_junit(junit, focus)
    (report_dir / "results.json").write_text(json.dumps([asdict(c) for c in cases], indent=1) + "\n")
    return cases


def _tail(path: Path, n: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def prepare(cluster: RealCluster, proxy: str, log: Log, *, localhost_nodeports: bool = False) -> None:
    """What e2e.test needs of the cluster: its images, the proxy, cluster DNS."""
    import_e2e_images(cluster, log)
    install_proxy(cluster, proxy, log, localhost_nodeports=localhost_nodeports)
    addons.install_coredns(cluster)


def compare(a_path: Path, b_path: Path) -> str:
    a = {c["name"]: c["result"] for c in json.loads(a_path.read_text())}
    b = {c["name"]: c["result"] for c in json.loads(b_path.read_text())}
    lines = [f"test | {a_path.parent.name} | {b_path.parent.name}", "---|---|---"]
    lines += [f"{name} | {a.get(name, '-')} | {b.get(name, '-')}" for name in sorted(set(a) | set(b))]
    worse = [n for n in sorted(set(a) | set(b)) if a.get(n) == "passed" and b.get(n) == "failed"]
    lines.append(f"{len(worse)} passed with {a_path.parent.name} and failed with {b_path.parent.name}")
    lines += [f"  {n}" for n in worse]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.realcluster.upstream", description=__doc__)
    p.add_argument("--proxy", choices=["nftproxy", "kube-proxy"], default="nftproxy")
    p.add_argument("--selection", choices=sorted(SELECTIONS), default="full")
    p.add_argument("--focus", default="", help="a ginkgo focus of its own instead of the selection's")
    p.add_argument("--report-dir", type=Path, default=None)
    p.add_argument("--cluster", help="a running cluster (python -m testkit.realcluster up --name NAME), prepared")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A_RESULTS", "B_RESULTS"))
    p.add_argument(
        "--nodes", type=int, default=2,
        help="kubelet nodes of the runner's own cluster, one zone each (3: Traffic Distribution's tests run)",
    )  # fmt: skip
    p.add_argument(
        "--localhost-nodeports", action="store_true",
        help="both proxies with nodePortAddresses [primary, localhost] and the gate "
        "KubeProxyNFTablesLocalhostNodePorts on; with --cluster, the proxy is installed (upgraded) so first",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return 0

    def log(s: str) -> None:
        print(s, flush=True)

    report = args.report_dir or ROOT / "_output" / "upstream-e2e" / args.proxy
    if args.cluster:
        attached = RealCluster.attach(args.cluster, log=log)
        if args.localhost_nodeports:
            install_proxy(attached, args.proxy, log, localhost_nodeports=True)
        cases = run_e2e(attached, args.selection, report, log, extra_focus=args.focus)
    else:
        c = RealCluster(f"ue2e{os.getpid()}", log=log, nodes=args.nodes)
        try:
            c.up(build=True)
            log(f"--> {args.proxy}, CoreDNS, the e2e images")
            prepare(c, args.proxy, log, localhost_nodeports=args.localhost_nodeports)
            cases = run_e2e(c, args.selection, report, log, extra_focus=args.focus)
        finally:
            c.down()
    print(table(cases))
    print(f"JUnit: {report / 'junit_01.xml'}")
    print(summary_line(cases))
    return 1 if any(c.result == "failed" for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
