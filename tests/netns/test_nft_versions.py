"""The image's nft and the node's read each other's tables.

The image runs Debian trixie's libnftables (1.1.x); a node may run an older nft (Debian bookworm's
1.0.6, this machine's). nft >= 1.1.2 writes set metadata for a ``type`` declaration that nft <=
1.1.1 cannot parse: listing the ruleset then crashes the node's nft (SIGSEGV), for every host tool
that reads it. Our table is declared with ``typeof`` only (compiler/skeleton.py), which both
write and read alike. Checked here with trixie's nft in a chroot (hack/trixie-nft.sh builds it,
cached under NFTPROXY_CACHE), in a network namespace of the test's own:

* the table nftproxy compiles (``nftproxy render`` of every golden input, plus an IPv6 copy of the
  load-balancing one, so IPv6 affinity and round-robin too), written by trixie's nft, is listed
  by this machine's nft without a crash and reads back exactly as when this machine's nft wrote
  it, and the other way round;
* this machine's libnftables (the proxy's backend) adopts the table trixie's nft wrote: a full
  sync finds nothing to change;
* the hazard itself: a ``type ipv4_addr`` set written by trixie's nft crashes this machine's nft
  (skipped where this machine's nft has the upstream fix).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nftproxy.compiler import compile_tables, features
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import load
from nftproxy.nft.diff import plan
from nftproxy.nft.kernel import KernelBackend
from testkit.lab.netlab import bare_netns
from tests.support.golden import CASES, GOLDEN
from tests.support.run import run_nftproxy

pytestmark = pytest.mark.netns

CACHE = Path(os.environ.get("NFTPROXY_CACHE") or Path.home() / ".cache" / "nftproxy")
ROOTFS = CACHE / "trixie-nft" / "rootfs"

# `nftproxy render` of a world with every kind of object, both families (the flags of `run`).
WORLD_FLAGS = (
    "--node-name", "node-1", "--node-ip", "198.18.0.1", "--node-ip", "fd00:198:18::1",
    "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:10:244::/48",
    "--nodeport-addresses", "primary,localhost",
    "--feature-gates", f"{features.LOCALHOST_NODEPORTS}=true",  # render has no cluster: the flag alone
)  # fmt: skip


@pytest.fixture(scope="module")
def rootfs() -> Path:
    if not (ROOTFS / "usr" / "sbin" / "nft").exists():
        pytest.skip(f"no trixie nft at {ROOTFS}: run hack/trixie-nft.sh (mmdebstrap, cached)")
    return ROOTFS


@pytest.fixture
def netns() -> Iterator[str]:
    with bare_netns("tx") as name:
        yield name


def host_nft(netns: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", netns, "nft", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=60)


def trixie_nft(netns: str, rootfs: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", netns, "chroot", str(rootfs), "nft", *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=60)


def ok(r: subprocess.CompletedProcess[str], what: str) -> str:
    assert r.returncode == 0, f"{what}: exit {r.returncode} (-11: SIGSEGV)\n{r.stderr[-2000:]}"
    return r.stdout


def ipv6_copy(text: str) -> str:
    """The load-balancing golden input (round-robin, source-hash, affinity, eTP Local, source
    ranges) as IPv6 Services in namespace v6, NodePorts moved by 100."""
    text = text.replace("addressType: IPv4", "addressType: IPv6").replace("namespace: default", "namespace: v6")
    for pattern, repl in (
        (r"\b10\.96\.0\.(\d+)", r"fd00:10:96::\1"),
        (r"\b10\.244\.(\d+)\.(\d+)", r"fd00:10:244:\1::\2"),
        (r"\b198\.19\.0\.(\d+)", r"fd00:198:19::\1"),
        (r"\b198\.18\.0\.0/24", "fd00:198:18::/64"),
        (r"\b203\.0\.113\.7\b", "2001:db8::7"),
        (r"nodePort: 300(\d\d)", r"nodePort: 301\1"),
    ):
        text = re.sub(pattern, repl, text)
    assert not re.search(r"\b(10|198|203)\.\d+\.\d+\.\d+", text)
    return text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The script nftproxy compiles for every golden input together (and the IPv6 copy)."""
    v6 = tmp_path_factory.mktemp("world") / "balancing-v6.yaml"
    v6.write_text(ipv6_copy((GOLDEN / "balancing.yaml").read_text()))
    sources = [*sorted({str(path) for path, _ in CASES.values()}), str(v6)]
    files = [arg for s in sources for arg in ("-f", s)]
    script = run_nftproxy("render", *files, *WORLD_FLAGS, check=True).stdout
    for kind in ("affinity-port-", "rr-services", "firewall-allow", "localhost-nodeport-reject-ports"):
        assert f"add map ip6 nftproxy {kind}" in script or f"add set ip6 nftproxy {kind}" in script, kind
    return script


def declarations(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith(("add set ", "add map "))]


def test_every_declaration_is_typeof(world: str) -> None:
    decls = declarations(world)
    assert len(decls) > 60
    assert [d for d in decls if " { typeof " not in d] == []


def test_written_by_trixie_nft_read_by_this_machines_nft_and_back(world: str, rootfs: Path, netns: str) -> None:
    script = world
    version = ok(trixie_nft(netns, rootfs, "--version"), "trixie nft --version")
    assert re.match(r"nftables v1\.1\.", version), version
    ok(trixie_nft(netns, rootfs, "-f", "-", stdin=script), "trixie nft -f")
    host_view = ok(host_nft(netns, "list", "ruleset"), "this machine's nft, listing trixie's table")
    trixie_view = ok(trixie_nft(netns, rootfs, "list", "ruleset"), "trixie nft, listing its own table")
    with bare_netns("tx") as other:  # the same script written by this machine's nft
        ok(host_nft(other, "-f", "-", stdin=script), "nft -f")
        assert ok(host_nft(other, "list", "ruleset"), "nft list") == host_view
        assert ok(trixie_nft(other, rootfs, "list", "ruleset"), "trixie nft, listing this machine's table") == (
            trixie_view
        )
    assert host_view.count("typeof ") == len(declarations(script))


@pytest.mark.parametrize("case", ["localhost", "balancing"])
def test_this_machines_libnftables_adopts_a_table_trixie_nft_wrote(case: str, rootfs: Path, netns: str) -> None:
    """Elements and the layout comment read back by the proxy's own backend (libnftables JSON,
    this machine's) as compiled: a full sync of the same inputs sends nothing."""
    source, config = CASES[case]
    inputs = load([str(source)])
    desired = compile_tables(inputs.services, inputs.slices, config, inputs.ignored)
    ok(trixie_nft(netns, rootfs, "-f", "-", stdin="".join(plan(None, t).render() for t in desired.tables)), "nft -f")
    backend = KernelBackend(netns)
    try:
        dp = Dataplane(backend, config)
        for s in inputs.services:
            dp.inputs.set_service(s)
        for sl in inputs.slices:
            dp.inputs.set_slice(sl)
        r = dp.sync()
        assert r.full and r.operations == 0, r
    finally:
        backend.close()
    ok(host_nft(netns, "list", "ruleset"), "this machine's nft after the sync")


def test_a_type_declaration_written_by_trixie_nft_crashes_this_machines_nft(rootfs: Path, netns: str) -> None:
    """Why every set is declared with typeof: the same set declared with `type`."""
    ok(trixie_nft(netns, rootfs, "-f", "-", stdin="add table ip t\nadd set ip t s { type ipv4_addr; }\n"), "nft -f")
    r = host_nft(netns, "list", "ruleset")
    if r.returncode == 0:
        pytest.skip(f"this machine's nft ({host_nft(netns, '--version').stdout.strip()}) reads it: it has the fix")
    assert r.returncode == -11, (r.returncode, r.stderr)
