"""The real kernel: atomic failures, incremental applies, adoption, only our own tables."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.compiler.skeleton import LAYOUT
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.manifests import classify, load
from nftproxy.nft.backend import NftError, is_not_found
from nftproxy.nft.bulk import LoadStep
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Element, Family, Table
from nftproxy.nft.transaction import Transaction
from testkit.k8s import objects as k
from testkit.lab.netlab import bare_netns
from testkit.lab.nftwatch import GenerationWatch
from tests.support.builders import GOOD, eps, expected, svc
from tests.support.golden import CASES, EXAMPLE, GOLDEN
from tests.support.run import run_nftproxy

pytestmark = pytest.mark.netns

CFG = ProxyConfig(node_name="n1", node_ips=(ip_address("198.18.0.1"),), cluster_cidrs=(ip_network("10.244.0.0/16"),))

OTHER_TABLE = """table inet firewall {
  chain input { type filter hook input priority 0; policy accept; tcp dport 22 accept; }
}
"""


@pytest.fixture
def netns() -> Iterator[str]:
    with bare_netns("ntk") as name:
        yield name


def nft(netns: str, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


def nftproxy(netns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_nftproxy(*args, netns=netns)


def test_failed_transaction_leaves_table_byte_identical(netns: str) -> None:
    backend = KernelBackend(netns)
    dp = Dataplane(backend, CFG)
    for i in range(5):
        dp.inputs.set_service(svc(i, node_port=True))
        dp.inputs.set_slice(eps(i, 3))
    dp.sync()
    before = nft(netns, "list", "ruleset")
    # A transaction that is fine up to its last command, which points at a chain that doesn't exist.
    tx = Transaction(Family.IP, "nftproxy")
    tx.add_elements("cluster-ips", [Element(("10.96.9.9",))])
    tx.delete_elements("service-ips", [("10.96.0.1", "tcp", "80")])
    tx.add_elements("service-ips", [Element(("10.96.9.9", "tcp", "80"), ("goto no-such-chain",))])
    with pytest.raises(NftError) as refused:
        backend.apply(tx)
    assert is_not_found(refused.value), refused.value  # the chain the verdict names
    assert nft(netns, "list", "ruleset") == before
    backend.close()


def test_a_refused_element_batch_gives_nfts_error_and_changes_nothing(netns: str) -> None:
    """An element-only transaction that carries its sets goes by netlink; refused, nothing was
    committed and the script is sent for nft's own error (the same refusal)."""
    backend = KernelBackend(netns)
    dp = Dataplane(backend, CFG)
    for i in range(5):
        dp.inputs.set_service(svc(i, node_port=True))
        dp.inputs.set_slice(eps(i, 3))
    dp.sync()
    table = dp.tables()[0]
    before = nft(netns, "list", "ruleset")
    tx = Transaction(Family.IP, "nftproxy")
    tx.add_elements("cluster-ips", [Element(("10.96.9.9",))])
    tx.delete_elements("service-ips", [("10.96.0.1", "tcp", "80")])
    tx.add_elements("service-ips", [Element(("10.96.9.9", "tcp", "80"), ("goto no-such-chain",))])
    tx.sets.update((n, table.sets[n]) for n in ("cluster-ips", "service-ips"))
    assert backend._element_batch([tx]) is not None  # the netlink path is taken
    with pytest.raises(NftError) as refused:
        backend.apply(tx)
    assert is_not_found(refused.value), refused.value  # the chain the verdict names
    assert nft(netns, "list", "ruleset") == before
    # the next batch is not confused by what the refused one left on the kept socket
    ok = Transaction(Family.IP, "nftproxy")
    ok.add_elements("cluster-ips", [Element(("10.96.9.9",))])
    ok.sets["cluster-ips"] = table.sets["cluster-ips"]
    assert backend._element_batch([ok]) is not None
    backend.apply(ok)
    assert "10.96.9.9" in nft(netns, "list", "set", "ip", "nftproxy", "cluster-ips")
    backend.close()


def test_element_batches_share_one_netlink_socket(netns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partial syncs send their batches on one kept socket: closing one after a transaction that
    deleted elements waits for an RCU grace period in the kernel (~8-16 ms on 6.18)."""
    from nftproxy.nft import netlink  # noqa: PLC0415

    opened: list[socket.socket] = []
    open_socket = netlink.open_socket

    def counted() -> socket.socket:
        opened.append(open_socket())
        return opened[-1]

    monkeypatch.setattr(netlink, "open_socket", counted)
    backend = KernelBackend(netns)
    dp = Dataplane(backend, CFG)
    for i in range(3):
        dp.inputs.set_service(svc(i))
        dp.inputs.set_slice(eps(i, 3))
    dp.sync()
    for step in range(4):
        dp.inputs.set_slice(eps(step % 3, 3, gen=step + 1))
        assert not dp.sync().full
    assert len(opened) == 1
    backend.close()
    assert opened[0].fileno() == -1  # closed with the backend


def test_element_only_partial_syncs_go_by_netlink_and_read_back_as_by_nft(
    netns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same changes, synced with element batches (True) and with nft scripts only (False):
    the kernel holds the same table after each sync; most partial syncs were batches."""
    from nftproxy.nft import netlink  # noqa: PLC0415

    sent: list[int] = []
    send = netlink.send

    def counted(batch: netlink.Batch, sock: socket.socket | None = None) -> None:
        sent.append(batch.count)
        send(batch, sock)

    monkeypatch.setattr(netlink, "send", counted)
    reads: dict[bool, list[dict[str, dict[tuple[str, ...], object]]]] = {}
    for batches in (False, True):
        backend = KernelBackend(netns)
        if not batches:
            monkeypatch.setattr(backend, "_element_batch", lambda txs: None)
        dp = Dataplane(backend, CFG)
        for i in range(6):
            dp.inputs.set_service(svc(i, node_port=i % 2 == 0))
            dp.inputs.set_slice(eps(i, 3))
        dp.sync()
        sent.clear()
        reads[batches] = []
        for step in range(5):
            _change(dp, step)
            assert not dp.sync().full
            read = backend.read(Family.IP, "nftproxy")
            assert read is not None
            reads[batches].append({k: dict(v) for k, v in read.elements.items()})
            assert reads[batches][-1] == expected(dp)[0]
        if batches:
            assert len(sent) >= 3, sent
        else:
            assert not sent
        assert dp.cleanup()
        backend.close()
    assert reads[True] == reads[False]


def _change(dp: Dataplane, step: int) -> None:
    if step == 0:
        dp.inputs.set_slice(eps(1, 3, gen=1))  # endpoints replaced: same count
    elif step == 1:
        dp.inputs.set_service(svc(6))  # a new Service
        dp.inputs.set_slice(eps(6, 3))
    elif step == 2:
        dp.inputs.delete_service("default/s2")
    elif step == 3:
        dp.inputs.set_slice(eps(3, 7))  # a new endpoint count: new objects (a script)
    else:
        dp.inputs.set_service(svc(4, node_port=False))  # its NodePort goes


def test_dataplane_syncs_match_the_full_compile_in_the_kernel(netns: str) -> None:
    backend = KernelBackend(netns)
    dp = Dataplane(backend, CFG)
    for i in range(8):
        dp.inputs.set_service(svc(i, node_port=i % 2 == 0, external=i == 3))
        dp.inputs.set_slice(eps(i, i % 5))
    assert dp.sync().full
    for i, n in ((1, 4), (2, 0), (3, 6), (5, 1)):
        dp.inputs.set_slice(eps(i, n, gen=1))
    dp.inputs.delete_service("default/s4")
    r = dp.sync()
    assert not r.full
    read = backend.read(Family.IP, "nftproxy")
    assert read is not None
    want_elements, want_chains = expected(dp)
    assert {k: dict(v) for k, v in read.elements.items()} == want_elements
    assert set(read.chains) == want_chains
    backend.close()


def test_apply_is_idempotent_then_incremental_and_owns_only_its_tables(netns: str, tmp_path: Path) -> None:
    nft(netns, "-f", "-", stdin=OTHER_TABLE)
    other_before = nft(netns, "list", "table", "inet", "firewall")
    objs = [k.service(f"s{i}", [f"10.96.0.{i + 1}"], [k.port(80)]) for i in range(20)]
    objs += [k.endpoint_slice(f"s{i}-1", f"s{i}", [k.endpoint(f"10.244.1.{i + 1}")], [k.port(8080)]) for i in range(20)]
    first = k.write(tmp_path / "a.yaml", objs)
    r = nftproxy(netns, "apply", "-f", str(first), "--node-ip", "198.18.0.1")
    assert r.returncode == 0, r.stderr
    ruleset = nft(netns, "list", "table", "ip", "nftproxy")

    again = nftproxy(netns, "apply", "-f", str(first), "--node-ip", "198.18.0.1")
    assert again.returncode == 0, again.stderr
    assert "0 operations, 0 element changes" in again.stdout
    assert nft(netns, "list", "table", "ip", "nftproxy") == ruleset

    objs[20] = k.endpoint_slice("s0-1", "s0", [k.endpoint("10.244.1.1"), k.endpoint("10.244.1.99")], [k.port(8080)])
    second = k.write(tmp_path / "b.yaml", objs)
    r = nftproxy(netns, "apply", "-f", str(second), "--node-ip", "198.18.0.1")
    assert r.returncode == 0, r.stderr
    # s0 moves from endpoints-1 to endpoints-2 (new map + chains), nothing else is rewritten
    assert "element changes" in r.stdout
    changes = int(r.stdout.split(" element changes")[0].rsplit(" ", 1)[1])
    assert changes == 6, r.stdout  # service-ips -1 +1, endpoints-1 -1, endpoints-2 +2, hairpin +1
    listing = nft(netns, "list", "table", "ip", "nftproxy")
    assert '10.96.0.1 . tcp . 80 comment "default/s0" : goto cluster-2' in listing

    assert nft(netns, "list", "table", "inet", "firewall") == other_before
    r = nftproxy(netns, "cleanup")
    assert r.returncode == 0 and "removed ip nftproxy, ip6 nftproxy" in r.stdout
    assert nft(netns, "list", "tables").split() == ["table", "inet", "firewall"]
    assert nft(netns, "list", "table", "inet", "firewall") == other_before


def test_restart_adopts_the_table_without_rewriting_it(netns: str) -> None:
    backend = KernelBackend(netns)
    dp = Dataplane(backend, CFG)
    for i in range(4):
        dp.inputs.set_service(svc(i))
        dp.inputs.set_slice(eps(i, 2))
    dp.sync()
    handles_before = nft(netns, "-a", "list", "table", "ip", "nftproxy")
    # a new process with the same inputs: reads the table, finds nothing to do
    dp2 = Dataplane(backend, CFG)
    for i in range(4):
        dp2.inputs.set_service(svc(i))
        dp2.inputs.set_slice(eps(i, 2))
    r = dp2.sync()
    assert r.full and r.operations == 0
    assert nft(netns, "-a", "list", "table", "ip", "nftproxy") == handles_before
    # a different configuration changes the rules: the table is rebuilt in one transaction
    dp3 = Dataplane(backend, ProxyConfig(masquerade_all=True, node_ips=CFG.node_ips))
    for i in range(4):
        dp3.inputs.set_service(svc(i))
        dp3.inputs.set_slice(eps(i, 2))
    dp3.sync()
    assert "cluster-2 {\n\t\tjump mark-for-masquerade" in nft(netns, "list", "table", "ip", "nftproxy")
    backend.close()


@pytest.mark.parametrize("layout", [2, 3, 4])
def test_a_table_of_an_older_layout_is_replaced_in_one_transaction(netns: str, layout: int) -> None:
    """An upgrade: the table an older nftproxy left (layout 2: the demo's golden table as 882ad58
    wrote it; layout 3: with `type` declarations, before every set was declared with typeof) is
    replaced by the first sync of the new one, deleted and created again in ONE transaction (the
    kernel's generations, seen by a netlink listener): never absent, never half; the handover table
    answers meanwhile (tests/netns/test_replacement_window.py)."""
    old = (GOLDEN / f"layout-{layout}" / "demo-default.nft").read_text()
    assert f'comment "nftproxy layout {layout} ' in old and layout != LAYOUT
    source, config = CASES["demo-default"]
    assert source == EXAMPLE
    inputs = load([str(source)])
    backend = KernelBackend(netns)
    with GenerationWatch(netns) as watch:
        nft(netns, "-f", "-", stdin=old)
        [loaded] = watch.wait(1, timeout=10)
        assert loaded.created_tables() == {("ip", "nftproxy"): layout, ("ip6", "nftproxy"): layout}
        dp = Dataplane(backend, config)
        for s in inputs.services:
            dp.inputs.set_service(s)
        for sl in inputs.slices:
            dp.inputs.set_slice(sl)
        r = dp.sync()
        assert r.full and r.operations > 0
        gens = watch.wait(4, timeout=10)
        assert dp.sync().operations == 0
        time.sleep(0.3)  # a stray transaction would have been seen by now
        gens = watch.generations()
        assert watch.overruns == 0
    # the load, then the sync: the handover table loaded, the table replaced, the handover deleted
    assert len(gens) == 4, [g.summary() for g in gens]
    handover = {("ip", "nftproxy-handover"), ("ip6", "nftproxy-handover")}
    assert set(gens[1].created_tables()) == handover and not gens[1].deleted_tables(), gens[1].summary()
    assert gens[3].deleted_tables() == handover and not gens[3].created_tables(), gens[3].summary()
    replaced = gens[2]
    assert replaced.deleted_tables() == {("ip", "nftproxy"), ("ip6", "nftproxy")}, replaced.summary()
    assert replaced.created_tables() == {("ip", "nftproxy"): LAYOUT, ("ip6", "nftproxy"): LAYOUT}
    # nothing of the old layout is left: a restarted proxy adopts the table as it is
    dp2 = Dataplane(backend, config)
    for s in inputs.services:
        dp2.inputs.set_service(s)
    for sl in inputs.slices:
        dp2.inputs.set_slice(sl)
    r2 = dp2.sync()
    assert r2.full and r2.operations == 0
    assert f'comment "nftproxy layout {LAYOUT} ' in nft(netns, "list", "table", "ip6", "nftproxy")
    backend.close()


def test_apply_refused_by_the_kernel_exits_1_with_one_line_and_changes_nothing(netns: str, tmp_path: Path) -> None:
    manifest = k.write(tmp_path / "a.yaml", [k.service("s", ["10.96.0.1"], [k.port(80)])])
    assert nftproxy(netns, "apply", "-f", str(manifest)).returncode == 0
    comment = nft(netns, "list", "table", "ip", "nftproxy").splitlines()[1].strip()
    # Someone rebuilt our table by hand with the right comment but a wrong map type.
    nft(netns, "delete", "table", "ip", "nftproxy")
    nft(
        netns,
        f"add table ip nftproxy {{ {comment}; }}; add map ip nftproxy service-ips {{ type ipv4_addr : verdict; }}",
    )
    before = nft(netns, "list", "ruleset")
    r = nftproxy(netns, "apply", "-f", str(manifest))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nftproxy: the kernel refused the transaction, nothing changed:"), (
        r.stderr
    )
    assert nft(netns, "list", "ruleset") == before


def test_bulk_first_load_by_netlink_equals_the_nft_text_load(netns: str) -> None:
    """Map elements sent as a packed netlink batch read back exactly as the nft-text path's:
    verdicts, concatenations with protocol/port/slot, comments, IPv4 and IPv6."""

    ports = [k.port(5353, "dns", "UDP"), k.port(8080, "web")]
    v4 = [k.endpoint("10.244.7.2"), k.endpoint("10.244.7.3")]
    objs = [
        *GOOD,
        k.service(
            "dual", ["10.96.7.1", "fd00:10:96::7:1"], [k.port(53, "dns", "UDP"), k.port(80, "web", node_port=30700)]
        ),
        k.endpoint_slice("dual-4", "dual", v4, ports),
        k.endpoint_slice("dual-6", "dual", [k.endpoint("fd00:10:244:7::2")], ports, address_type="IPv6"),
        k.service("none", ["10.96.7.9"], [k.port(80)]),
    ]
    results = _load_text_then_bulk(netns, objs)
    for f in Family:
        text, fast = results[False][f], results[True][f]
        assert text is not None and fast is not None
        assert fast.elements == text.elements and fast.comment == text.comment and set(fast.chains) == set(text.chains)
    fast4 = results[True][Family.IP]
    assert fast4 is not None and ("10.96.7.1", "udp", "53") in fast4.elements["service-ips"]


def test_bulk_load_of_long_named_services_splits_its_messages_by_size(netns: str) -> None:
    """Names of 63 characters make ~200-byte elements (their comment): the netlink messages are
    cut by size (a nested attribute holds at most 64 KiB), and everything reads back as by nft."""
    ns = "n" * 63
    ports = [k.port(80, "p" * 15), k.port(443, "q" * 15)]
    objs: list[k.Obj] = []
    for i in range(400):
        name = f"s{i:04d}" + "x" * 58
        objs.append(k.service(name, [f"10.96.{i // 250}.{i % 250 + 1}"], ports, namespace=ns))
        if i % 2:  # the other half has no endpoints: reject verdicts, commented too
            eps = [k.endpoint(f"10.244.{i // 250}.{i % 250 + 1}")]
            objs.append(k.endpoint_slice(f"{name[:57]}-abcde", name, eps, ports, namespace=ns))
    results = _load_text_then_bulk(netns, objs)
    text, fast = results[False][Family.IP], results[True][Family.IP]
    assert text is not None and fast is not None
    assert sum(len(v) for v in text.elements.values()) > 1500
    assert fast.elements == text.elements
    some = next(iter(fast.elements["no-endpoint-services"].values()))
    assert some.comment is not None and len(some.comment) == 127, "the longest comment the kernel keeps"


def test_chunked_load_of_services_sharing_endpoints_reads_back_as_by_nft(netns: str) -> None:
    """The hairpin set goes with the chunks of a first load: an endpoint shared by Services of
    different chunks is sent by each of them (the kernel takes the second add); all reads back as by nft."""
    port = [k.port(80)]
    objs: list[k.Obj] = []
    for i in range(12):  # 3 chunks of 4; each endpoint is in Services 4 apart (other chunks)
        objs.append(k.service(f"s{i:02d}", [f"10.96.9.{i + 1}"], port))
        ep = k.endpoint(f"10.244.9.{i % 4 + 1}", node="n1")  # on this node: hairpin entries
        objs.append(k.endpoint_slice(f"s{i:02d}-x", f"s{i:02d}", [ep], port))
    results = _load_text_then_bulk(netns, objs)
    text, fast = results[False][Family.IP], results[True][Family.IP]
    assert text is not None and fast is not None
    assert len(fast.elements["hairpin-endpoints"]) == 4
    assert fast.elements == text.elements


def _load_text_then_bulk(netns: str, objs: list[k.Obj]) -> dict[bool, dict[Family, Table | None]]:
    """Load ``objs`` into an empty table by nft text (False), then by the bulk netlink paths
    (True: all compiled first; "stream": compiled in 3 chunks while the kernel loads); read back.
    Both bulk paths must read back the same."""
    inputs = classify(objs)
    results: dict[object, dict[Family, Table | None]] = {}
    for mode in (False, True, "stream"):
        backend = KernelBackend(netns)
        dp = Dataplane(backend, CFG)
        dp.bulk_elements = 10**9 if mode is False else 1
        dp.stream_services = 1 if mode == "stream" else 10**9
        dp.stream_chunks = 3
        for s in inputs.services:
            dp.inputs.set_service(s)
        for sl in inputs.slices:
            dp.inputs.set_slice(sl)
        result = dp.sync()
        assert result.full and (mode is False or result.element_changes >= dp.batched > 0)
        assert dp.sync().operations == 0, "what was loaded is exactly what is desired"
        results[mode] = {f: backend.read(f, "nftproxy") for f in Family}
        assert dp.cleanup()
        backend.close()
    for f in Family:
        bulk, stream = results[True][f], results["stream"][f]
        assert bulk is not None and stream is not None
        assert stream.elements == bulk.elements and set(stream.chains) == set(bulk.chains)
    return {False: results[False], True: results[True]}


class _RefusesStep(KernelBackend):
    """The real kernel, with a step of the first load the kernel refuses (an element for a map
    that does not exist), after earlier steps were committed."""

    def __init__(self, netns: str, n: int) -> None:
        super().__init__(netns)
        self.n = n

    def load(self, steps: Iterable[LoadStep]) -> int:
        def refused() -> Iterator[LoadStep]:
            for i, step in enumerate(steps):
                if i == self.n:
                    bad = Transaction(Family.IP, "nftproxy")
                    bad.add_elements("no-such-map", [Element(("10.0.0.1",))])
                    step = LoadStep([*step.txs, bad], step.loads)
                yield step

        return super().load(refused())


def test_a_first_bulk_load_refused_half_way_is_rolled_back(netns: str) -> None:
    nft(netns, "-f", "-", stdin=OTHER_TABLE)
    before = nft(netns, "list", "ruleset")
    backend = _RefusesStep(netns, 2)
    dp = Dataplane(backend, CFG)
    dp.bulk_elements, dp.stream_services, dp.stream_chunks = 1, 1, 3
    for i in range(9):
        dp.inputs.set_service(svc(i, node_port=True))
        dp.inputs.set_slice(eps(i, 3))
    with pytest.raises(NftError, match=r"rolled back: no nftproxy table, as before"):
        dp.sync()
    assert nft(netns, "list", "ruleset") == before  # the first steps' declarations are gone
    backend.n = -1
    assert dp.sync().full
    assert expected(dp) == _state(backend)
    backend.close()


def _state(backend: KernelBackend) -> tuple[dict[str, dict[tuple[str, ...], object]], set[str]]:
    t = backend.read(Family.IP, "nftproxy")
    assert t is not None
    return {name: dict(els) for name, els in t.elements.items()}, set(t.chains)


def test_a_node_without_etc_protocols_reads_the_table_back_the_same(netns: str, tmp_path: Path) -> None:
    """Without /etc/protocols (a minimal image) nft prints protocols by number: read back, they
    are named as the compiler names them, so a second apply still sends nothing (before, every
    map element looked changed and every full sync rewrote them all)."""
    objs = [*GOOD, k.service("u", ["10.96.9.1"], [k.port(53, "dns", "UDP", node_port=30953)], type="NodePort")]
    objs.append(k.endpoint_slice("u-1", "u", [k.endpoint("10.244.9.2")], [k.port(5353, "dns", "UDP")]))
    manifest = k.write(tmp_path / "objs.yaml", objs)
    apply = f"{sys.executable} -m nftproxy apply -f {manifest} --node-name n1 --node-ip 198.18.0.1"
    script = f"mount --bind /dev/null /etc/protocols && ip netns exec {netns} {apply} && ip netns exec {netns} {apply}"
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()
    assert ": 0 operations" not in first, r.stdout
    assert ": 0 operations, 0 element changes" in second, r.stdout
    show = f"mount --bind /dev/null /etc/protocols && ip netns exec {netns} nft list map ip nftproxy service-ips"
    listing = subprocess.run(["unshare", "-m", "sh", "-c", show], capture_output=True, text=True, check=True).stdout
    assert " . 17 . 53 " in listing, "the check is real: this nft does print numbers here"


@pytest.mark.parametrize(
    "cidrs",
    [
        ("10.96.0.0/16", "fd00:10:96::/112"),  # the usual pair
        ("10.96.0.0/12", "10.96.0.0/16", "10.96.5.7/32", "10.97.0.0/24"),  # nested, a host, apart
        ("fd00:10:96::/112", "fd00:10:96::1/128", "2001:db8::/64"),  # IPv6 host and wide prefixes
        ("10.96.0.0/24", "10.96.1.0/24"),  # adjacent: merged into one /23 by the compiler
    ],
    ids=["pair", "ipv4-shapes", "ipv6-shapes", "adjacent"],
)
def test_service_cidr_shapes_load_and_read_back(netns: str, cidrs: tuple[str, ...]) -> None:
    """The shapes ServiceCIDRs come in reach the kernel's interval set as one transaction, and the
    table reads back as compiled (the next sync sends nothing)."""
    cfg = CFG.with_service_cidrs(ip_network(c) for c in cidrs)
    backend = KernelBackend(netns)
    dp = Dataplane(backend, cfg)
    dp.inputs.set_service(svc(0, node_port=True))
    dp.inputs.set_slice(eps(0, 2))
    dp.sync()
    dp.forget()
    again = dp.sync()
    assert again.full and again.operations == 0, again
    listed = nft(netns, "list", "set", "ip", "nftproxy", "service-cidrs")
    v4 = [c for c in cidrs if ":" not in c]
    assert ("elements" in listed) == bool(v4)
    backend.close()
