"""Maglev against source-hash with real packets: 10 endpoints, 10,000 client addresses.

A client namespace owns 100.64.0.0/18 (a local route: any address in it can be bound) and sends
one UDP datagram from each of 10,000 addresses to four ClusterIPs with the same endpoints:
source-hash, and maglev with tables of 251 (the default), 1021 and 2039 slots. Which pod answers
each client is recorded; then an eleventh endpoint is added and everything recorded again; then
one of the first ten is removed, and recorded again. The share of clients whose endpoint changed
is printed for each step. Maglev with 2039 slots (~200 x N) keeps it within 1.2/N; source-hash
moves several times more.

Each measured share is also the one predicted from the table (within the sampling error of
10,000 clients), so the kernel does what the compiler computed: maglev, the share of its table's
slots that changed (compiler/maglev.py); source-hash, the share of the hash range whose endpoint
changed. The kernel's ``jhash … mod N`` is not ``hash % N`` but ``hash * N >> 32`` (nft_jhash's
reciprocal_scale): N ranges of the hash, so going from N to N + 1 keeps about half the clients
on their slot, and source-hash moves fewer than the ``1 - 1/N`` a modulo would.

IPv6 (``jhash ip6 saddr``): 40 client addresses, each kept on one endpoint, spread over them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nftproxy.compiler import maglev
from testkit.disruption import slots_moved, source_hash_moved
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, Pod, cleanup_stale
from tests.support.run import nftproxy_argv

pytestmark = pytest.mark.netns

N = 10
CLIENTS = 10_000
FIRST = "100.64.0.1"  # the clients: 100.64.0.1 … 100.64.39.16, in 100.64.0.0/18
DNS = [k.port(5353, "dns", "UDP")]
SERVICES = {  # name -> (ClusterIP, annotations)
    "sh": ("10.96.7.10", {"nftproxy.io/load-balancing": "source-hash"}),
    "mg": ("10.96.7.20", {"nftproxy.io/load-balancing": "maglev"}),
    "mg1021": ("10.96.7.30", {"nftproxy.io/load-balancing": "maglev", "nftproxy.io/maglev-table-size": "1021"}),
    "mg2039": ("10.96.7.40", {"nftproxy.io/load-balancing": "maglev", "nftproxy.io/maglev-table-size": "2039"}),
}
VIP6 = "fd00:10:96::720"  # maglev over IPv6: jhash ip6 saddr
SOURCES6 = [f"fd00:64::{i:x}" for i in range(1, 41)]  # in fd00:64::/112, owned by the client namespace
SIZES = {"mg": 251, "mg1021": 1021, "mg2039": 2039}
GOAL = 1.2 / N


@dataclass
class Lab:
    lab: NetLab
    node: Node
    pods: list[Pod]
    client: Client
    tmp: Path

    def apply(self, pods: list[Pod]) -> None:
        objs: list[k.Obj] = []
        for name, (ip, notes) in SERVICES.items():
            objs.append(k.service(name, [ip], [k.port(53, "dns", "UDP")], annotations=notes))
            objs.append(k.endpoint_slice(f"{name}-1", name, [k.endpoint(p.ipv4, node="node1") for p in pods], DNS))
        objs.append(k.service("mg6", [VIP6], [k.port(53, "dns", "UDP")], annotations=SERVICES["mg"][1]))
        objs.append(k.endpoint_slice("mg6-1", "mg6", [k.endpoint(p.ipv6, node="node1") for p in pods], DNS,
                                     address_type="IPv6"))  # fmt: skip
        manifest = k.write(self.tmp / "objects.yaml", objs)
        r = self.lab.exec(self.node, *nftproxy_argv(), "apply", "-f", str(manifest), "--node-name", "node1",
                          "--node-ip", f"{self.node.ipv4},{self.node.ipv6}",
                          "--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48", check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr
        self.lab.exec(self.node, "conntrack", "-F", check=False)  # fresh flows for the next sweep

    def record(self, source_port: int) -> dict[str, dict[str, str]]:
        """Service -> client address -> the pod that answered it."""
        targets = [(ip, 53) for ip, _ in SERVICES.values()]
        got = self.lab.sweep(self.client, FIRST, CLIENTS, targets, source_port)
        out = {}
        for name, (ip, _) in SERVICES.items():
            answers = got[f"{ip}:53"]
            missing = [c for c, pod in answers.items() if pod is None]
            assert len(missing) <= CLIENTS // 1000, f"{name}: {len(missing)} clients unanswered"
            out[name] = {c: pod for c, pod in answers.items() if pod is not None}
        return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    cleanup_stale("mg")
    with NetLab("mg") as nl:
        node = nl.add_node("node1", 1)
        pods = [nl.add_pod(node, f"p{i}", tcp=(), udp=(5353,)) for i in range(N + 1)]
        client = nl.add_client("clients", 100, via=node)
        nl.ip(client, "route add local 100.64.0.0/18 dev lo", f"route add 10.96.0.0/16 via {node.ipv4} dev eth0")
        nl.exec(client, "sysctl", "-qw", "net.ipv6.ip_nonlocal_bind=1")  # IPv6 binds need it, local route or not
        nl.ip(client, "route add local fd00:64::/112 dev lo", f"route add fd00:10:96::/112 via {node.ipv6} dev eth0")
        nl.ip(node, f"route add 100.64.0.0/18 via {client.ipv4} dev eth0",
              f"route add fd00:64::/112 via {client.ipv6} dev eth0")  # fmt: skip
        yield Lab(nl, node, pods, client, Path(tmp_path_factory.mktemp("maglev")))


def changed(before: dict[str, str], after: dict[str, str]) -> float:
    both = before.keys() & after.keys()
    return sum(before[c] != after[c] for c in both) / len(both)


def predicted(pods_before: list[Pod], pods_after: list[Pod], size: int) -> float:
    """The share of the table's slots whose endpoint changed."""
    before = maglev.table([(p.ipv4, "5353") for p in pods_before], size)
    return slots_moved(before, maglev.table([(p.ipv4, "5353") for p in pods_after], size))


def test_maglev_moves_about_one_nth_of_the_clients_source_hash_most(lab: Lab) -> None:
    ten, eleven = lab.pods[:N], lab.pods
    fewer = [p for p in eleven if p.name != "p3"]  # one of the first ten removed
    lab.apply(ten)
    first = lab.record(41000)
    again = lab.record(42000)  # the same clients, new flows: the same endpoints
    for name in SERVICES:
        assert changed(first[name], again[name]) == 0, name
        assert set(first[name].values()) == {p.name for p in ten}, name  # every endpoint used
    lab.apply(eleven)
    added = lab.record(43000)
    lab.apply(fewer)
    removed = lab.record(44000)
    shares = {name: (changed(first[name], added[name]), changed(added[name], removed[name])) for name in SERVICES}
    print(f"\nclients that changed endpoint ({CLIENTS} clients, N = {N}; 1/N = {1 / N:.3f}, goal {GOAL:.3f}):")
    predictions = {}
    for name, (add, rem) in shares.items():
        size = SIZES.get(name)
        if size:
            want = (predicted(ten, eleven, size), predicted(eleven, fewer, size))
        else:
            want = (
                source_hash_moved([p.ipv4 for p in ten], [p.ipv4 for p in eleven]),
                source_hash_moved([p.ipv4 for p in eleven], [p.ipv4 for p in fewer]),
            )
        print(f"  {name:<8} add one: {add:.3f} ({add * N:.2f}/N)  remove one: {rem:.3f} ({rem * N:.2f}/N)"
              f"  (predicted {want[0]:.3f} / {want[1]:.3f})")  # fmt: skip
        predictions[name] = want
    for name, want in predictions.items():  # the kernel did what the table says (10,000 clients: ~0.005)
        assert abs(shares[name][0] - want[0]) < 0.02 and abs(shares[name][1] - want[1]) < 0.02, (name, shares, want)
    assert max(shares["mg2039"]) <= GOAL, shares["mg2039"]
    sh_add, sh_remove = shares["sh"]
    for name in SIZES:
        add, rem = shares[name]
        assert add < sh_add / 1.5 and rem < sh_remove / 1.5, (name, shares[name], shares["sh"])
        assert "p3" not in set(removed[name].values())  # no client goes to the removed endpoint
    # source-hash moves at least twice the clients maglev with 2039 slots moves
    assert sh_add > 2 * shares["mg2039"][0] and sh_remove > 2 * shares["mg2039"][1], shares


def test_maglev_over_ipv6_keeps_each_client_on_its_endpoint(lab: Lab) -> None:
    """``jhash ip6 saddr mod M``: each of 40 client addresses gets one endpoint, the one its slot
    holds, again and again; the clients spread over the endpoints."""
    lab.apply(lab.pods[:N])
    chosen = {}
    for source in SOURCES6:
        results = lab.lab.probe(lab.client, "udp", VIP6, 53, count=3, timeout=1.0, source=source)
        assert all(r.ok for r in results), results
        got = {str(r.pod) for r in results}
        assert len(got) == 1, f"{source} reached {got}"
        chosen[source] = got.pop()
    assert len(set(chosen.values())) >= 5, chosen  # 40 clients over 10 endpoints
