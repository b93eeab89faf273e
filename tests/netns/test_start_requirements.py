"""`nftproxy run` refuses a node without what it needs, before its first sync, with one line on
stderr and exit 1, as kube-proxy's nftables mode refuses to start: on a kernel that reports a
version older than 5.13 (``setarch --uname-2.6``: the real uname call answers 2.6.x), and where
the process may not use nf_tables (no CAP_NET_ADMIN). Each runs in a namespace of its own, with an
apiserver address nothing listens on: the refusal comes before any of it is used, and nothing is
programmed. The decisions themselves: tests/unit/test_start_requirements.py."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nftproxy.nft.kernel import KernelBackend
from testkit.lab.netlab import bare_netns
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns


@pytest.fixture
def kubeconfig() -> Iterator[str]:
    """An apiserver on 127.0.0.1:1 (nothing there), in a directory any user may read."""
    with tempfile.TemporaryDirectory(prefix="nftproxy-req-") as d:
        os.chmod(d, 0o755)  # noqa: S103  (the unprivileged run reads it; a test's own directory)
        path = Path(d) / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        )
        path.chmod(0o644)
        yield str(path)


def run_in(netns: str, prefix: list[str], kubeconfig: str) -> subprocess.CompletedProcess[str]:
    run = nftproxy_argv("run", "--kubeconfig", kubeconfig, "--node-name", "n1")
    argv = ["ip", "netns", "exec", netns, *prefix, *run]
    env = {k: v for k, v in os.environ.items() if k != "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"}
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60, env=env)


def tables(netns: str) -> str:
    r = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", "list", "tables"], capture_output=True, text=True, check=True
    )
    return r.stdout


def refusal(stderr: str) -> list[str]:
    """The lines of a refused start but its log lines: the version and the effective configuration
    are logged first (as kube-proxy's "Version info"), then the one line of the refusal."""
    return [line for line in stderr.splitlines() if not re.match(r"^\d{4}-\d\d-\d\d \S+ (INFO|WARNING) ", line)]


def test_run_refuses_a_kernel_older_than_5_13(kubeconfig: str) -> None:
    old = ["setarch", platform.machine(), "--uname-2.6"]  # uname answers 2.6.x: an "old kernel"
    release = subprocess.run([*old, "uname", "-r"], capture_output=True, text=True, check=True)
    assert release.stdout.startswith("2.6."), release
    with bare_netns("req") as ns:
        r = run_in(ns, old, kubeconfig)
        assert r.returncode == 1, r
        assert refusal(r.stderr) == [
            f"nftproxy: needs Linux 5.13 or later (as kube-proxy's nftables mode), this node runs "
            f"{release.stdout.strip()}; KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK=1 skips this check"
        ]
        assert tables(ns) == ""


def test_run_refuses_without_cap_net_admin(kubeconfig: str) -> None:
    # root without CAP_NET_ADMIN (still able to read the checkout, wherever it is)
    nobody = ["setpriv", "--bounding-set=-net_admin", "--inh-caps=-net_admin"]
    with bare_netns("req") as ns:
        r = run_in(ns, nobody, kubeconfig)
        assert r.returncode == 1, r
        assert refusal(r.stderr) == [
            "nftproxy: nf_tables is not usable here: Operation not permitted (needs the kernel's nf_tables, "
            "libnftables and CAP_NET_ADMIN in the node's network namespace)"
        ]
        assert tables(ns) == ""


def test_probe_answers_with_the_ruleset_generation_without_changing_it() -> None:
    """The nf_tables probe (KernelBackend.probe): the kernel's ruleset generation, which a commit
    moves on and the probe itself does not."""
    with bare_netns("req") as ns:
        backend = KernelBackend(ns)
        try:
            first = backend.probe()
            assert backend.probe() == first
            subprocess.run(["ip", "netns", "exec", ns, "nft", "add", "table", "ip", "probe-test"], check=True)
            assert backend.probe() > first
        finally:
            backend.close()
        assert tables(ns) == "table ip probe-test\n"
