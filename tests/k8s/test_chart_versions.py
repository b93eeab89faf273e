"""The Kubernetes versions the chart claims (Chart.yaml ``kubeVersion``), tested on the oldest
(v1.35.4) and the newest (v1.38) apiservers (hack/k8s-versions.sh; hack/test.sh builds them), and
on the pinned one when it is neither: helm accepts the cluster, the ProxyStatus CRD and its
schema, the RBAC rules nftproxy needs (ServiceCIDRs included), and the ValidatingAdmissionPolicy
that binds a node's token to its own ProxyStatus."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testkit.k8s import versions
from testkit.k8s.controlplane import ControlPlane
from tests.k8s.helmchart import CHART, Helm, HelmError, Release
from tests.support.controlplanes import NEWEST, OLDEST, apiserver_of, started_control_plane

pytestmark = pytest.mark.k8s
# the oldest and the newest the chart claims, and the pinned one (K8S_VERSION) when it is neither
VERSIONS = sorted({OLDEST, NEWEST, versions.current()}, key=lambda v: (versions.minor(v), v))


@pytest.fixture(scope="module", params=VERSIONS)
def versioned(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane of its own per version (the session's, the pinned one, shared)."""
    if request.param == versions.current():
        yield request.getfixturevalue("control_plane")
    else:
        yield from started_control_plane(apiserver_bin=apiserver_of(request.param))


def _server_version(cp: ControlPlane) -> str:
    return str(json.loads(cp.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"])


@pytest.fixture(scope="module")
def release(versioned: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The chart installed with its defaults, node-bound identity on."""
    helm = Helm(tmp_path_factory.mktemp("helm-versions"), versioned.kubeconfig)
    name, ns = f"v{secrets.token_hex(3)}", f"nftproxy-v{secrets.token_hex(3)}"
    helm("install", name, str(CHART), "--namespace", ns, "--create-namespace")
    rel = Release(versioned, helm, name, ns)
    try:
        yield rel
    finally:
        rel.uninstall()


def test_the_claimed_range_is_what_we_test() -> None:
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert claim == ">=1.35.0-0 <1.39.0-0"
    assert OLDEST.startswith("v1.35.") and NEWEST.startswith("v1.38.")


def test_helm_refuses_a_cluster_outside_the_claim(tmp_path: Path) -> None:
    helm = Helm(tmp_path)
    cases = (("1.34.12", False), ("1.35.0", True), ("1.37.2", True), ("1.38.0-beta.0", True), ("1.38.0", True),
             ("1.38.9-gke.1", True), ("1.39.0-alpha.1", False), ("1.39.0", False))  # fmt: skip
    for version, ok in cases:
        if ok:
            helm("template", "np", str(CHART), "--kube-version", version)
        else:
            with pytest.raises(HelmError, match=r"kubeVersion|incompatible"):
                helm("template", "np", str(CHART), "--kube-version", version)


def test_install_crd_and_status_schema(versioned: ControlPlane, release: Release) -> None:
    version = _server_version(versioned)
    assert version in VERSIONS, version
    cp = versioned
    cp.kubectl("wait", "--for=condition=Established", "crd/proxystatuses.nftproxy.io", "--timeout=30s")
    status = {"apiVersion": "nftproxy.io/v1alpha1", "kind": "ProxyStatus", "metadata": {"name": "schema-check"}}
    cp.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps({**status, "spec": {"nodeName": "n"}}))
    bad = cp.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=json.dumps({**status, "spec": {"nodeName": 5}}), check=False
    )
    assert bad.returncode != 0 and "nodeName" in bad.stderr
    objs = {
        o["kind"]
        for o in yaml.safe_load_all(release.helm("get", "manifest", release.name, "-n", release.namespace).stdout)
        if o
    }
    assert {"DaemonSet", "ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= objs


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("list", "services", True),
        ("watch", "services", True),
        ("list", "endpointslices.discovery.k8s.io", True),
        ("watch", "endpointslices.discovery.k8s.io", True),
        ("list", "servicecidrs.networking.k8s.io", True),
        ("watch", "servicecidrs.networking.k8s.io", True),
        ("get", "nodes", True),
        ("create", "events", True),
        ("create", "proxystatuses.nftproxy.io", True),
        ("create", "services", False),
        ("update", "endpointslices.discovery.k8s.io", False),
        ("list", "secrets", False),
        ("patch", "nodes", False),
    ],
)
def test_rbac(versioned: ControlPlane, release: Release, verb: str, resource: str, allowed: bool) -> None:
    sa = f"system:serviceaccount:{release.namespace}:{release.service_account}"
    got = versioned.kubectl("auth", "can-i", verb, resource, f"--as={sa}", check=False).stdout.strip()
    assert got == ("yes" if allowed else "no"), f"{sa} {verb} {resource}: {got}"


def test_a_nodes_token_writes_only_its_own_proxystatus(
    versioned: ControlPlane, release: Release, tmp_path: Path
) -> None:
    """The ValidatingAdmissionPolicy: a token bound to a Pod on node A (the API server adds the
    node's name to its user) may write ProxyStatus A only; a token bound to no node, none."""
    cp = versioned
    node = f"node-{secrets.token_hex(2)}"
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nftproxy-x", "namespace": release.namespace},
        "spec": {
            "nodeName": node,
            "serviceAccountName": release.service_account,
            "containers": [{"name": "c", "image": "nftproxy:0"}],
        },
    }
    cp.kubectl("apply", "-f", "-", input=json.dumps(pod))
    bound = cp.kubectl(
        "create", "token", release.service_account, "-n", release.namespace,
        "--bound-object-kind=Pod", "--bound-object-name=nftproxy-x", "--duration=10m",
    ).stdout.strip()  # fmt: skip
    as_node = cp.token_kubeconfig(bound, tmp_path / "node.kubeconfig")
    as_nobody = release.token_kubeconfig(tmp_path / "unbound.kubeconfig")

    def write(name: str, kubeconfig: Path) -> tuple[int, str]:
        obj = {
            "apiVersion": "nftproxy.io/v1alpha1",
            "kind": "ProxyStatus",
            "metadata": {"name": name},
            "spec": {"nodeName": name},
        }
        r = cp.kubectl("create", "-f", "-", input=json.dumps(obj), kubeconfig=kubeconfig, check=False)
        return r.returncode, r.stderr

    try:
        assert write(node, as_node)[0] == 0
        rc, err = write("other-node", as_node)
        assert rc != 0 and f"the token of node {node} may write only ProxyStatus {node}" in err
        rc, err = write(f"{node}-2", as_nobody)
        assert rc != 0 and "bound to no node" in err
    finally:
        cp.kubectl("delete", "proxystatus", node, "--ignore-not-found", check=False)
        cp.kubectl("delete", "pod", "nftproxy-x", "-n", release.namespace, "--wait=false", check=False)
        cp.kubectl("delete", "node", node, "--wait=false", check=False)
