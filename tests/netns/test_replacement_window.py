"""A table replaced in one transaction (an upgrade or a rollback across layouts) refuses no
NodePort connection, with real packets.

The kernel makes a new interval set's elements visible a moment after the transaction's
generation has flipped (the set backend's commit step: nft_set_rbtree, pipapo), while a hash
set's turn active with the generation itself. Layout 4 declared ``nodeport-ips`` as an interval
set, so right after a replacement the new NodePort rule briefly looked up an empty set: a SYN
then was not DNATed and the node refused it (found by tests/e2e/test_upgrade.py: 1 of ~850
connections, 0.14 s after node-2's replacement, its conntrack entry without DNAT). Layout 5
declares it a plain set when it holds host addresses (skeleton.base_sets).

Layout 5 also makes a replacement go through a handover table (names.HANDOVER_SUFFIX): the new
contents are loaded first as ``nftproxy-handover``, whose elements are live once that transaction
returns; then ``nftproxy`` is replaced in one transaction while the handover table's rules answer;
then the handover table is deleted. Without it, this test refused 1 connection in 200 replacements
with the plain set (and passed another time) and 1 to 12 in 300 with an interval set (CIDRs).

Here a client in its own namespace opens connections to node1's NodePort back to back while the
table is replaced (two configs whose layouts differ: with and without --masquerade-all), and
every transaction is seen by a netlink listener.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from ipaddress import ip_address, ip_network

import pytest

from nftproxy.compiler import ProxyConfig
from nftproxy.dataplane.sync import Dataplane
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.kernel import KernelBackend
from testkit.k8s import objects as k
from testkit.lab.netlab import Client, NetLab, Node, cleanup_stale
from testkit.lab.nftwatch import GenerationWatch

pytestmark = pytest.mark.netns

NODE_PORT = 30080
REPLACEMENTS = 200

CLIENT = """
import json, signal, socket, sys
ok = refused = other = 0
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
print("READY", flush=True)
while not stop:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()
        ok += 1
    except ConnectionRefusedError:
        refused += 1
    except OSError:
        other += 1
print(json.dumps({"ok": ok, "refused": refused, "other": other}), flush=True)
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[NetLab, Node, Client, str]]:
    cleanup_stale("nrw")
    with NetLab("nrw") as lab:
        node = lab.add_node("node1", 1)
        pod = lab.add_pod(node, "a", tcp=(8080,))
        ext = lab.add_client("ext", 100, via=node)
        yield lab, node, ext, pod.ipv4


def objects(pod_ip: str) -> tuple[Service, EndpointSlice]:
    s = k.parsed(k.service("web", ["10.96.0.10"], [k.port(80, "http", node_port=NODE_PORT)], type="NodePort"))
    es = k.parsed(
        k.endpoint_slice("web-x", "web", [k.endpoint(pod_ip, ready=True, node="node1")], [k.port(8080, "http")])
    )
    assert isinstance(s, Service) and isinstance(es, EndpointSlice)
    return s, es


def config(node: Node, masquerade_all: bool, nodeport_addresses: tuple[str, ...] = ()) -> ProxyConfig:
    return ProxyConfig(
        node_name="node1",
        node_ips=(ip_address(node.ipv4),),
        cluster_cidrs=(ip_network("10.244.0.0/16"),),
        masquerade_all=masquerade_all,
        nodeport_addresses=tuple(ip_network(a) for a in nodeport_addresses),
    )


@pytest.mark.parametrize("nodeport_addresses", [(), ("198.18.0.0/24",)], ids=["primary", "cidr"])
def test_a_table_replaced_in_one_transaction_refuses_no_nodeport_connection(
    lab: tuple[NetLab, Node, Client, str], nodeport_addresses: tuple[str, ...]
) -> None:
    """primary: nodeport-ips a plain set; cidr: an interval set (the window is wider there)."""
    netlab, node, ext, pod_ip = lab
    service, endpoints = objects(pod_ip)
    backend = KernelBackend(node.netns)
    configs = [config(node, m, nodeport_addresses) for m in (False, True)]

    def sync(i: int) -> None:
        dp = Dataplane(backend, configs[i % 2])  # a new proxy, of the other layout: it replaces the table
        dp.inputs.set_service(service)
        dp.inputs.set_slice(endpoints)
        assert dp.sync().full

    sync(0)
    table = netlab.exec(node, "nft", "list", "set", "ip", "nftproxy", "nodeport-ips").stdout
    assert ("interval" in table) == bool(nodeport_addresses), table
    client = netlab.popen(ext, "python3", "-c", CLIENT, node.ipv4, str(NODE_PORT), stdout=-1)
    assert client.stdout is not None and client.stdout.readline().strip() == b"READY"
    try:
        with GenerationWatch(node.netns) as watch:
            for i in range(1, REPLACEMENTS + 1):
                sync(i)
            gens = watch.wait(3 * REPLACEMENTS, timeout=30)  # handover loaded, table replaced, handover deleted
    finally:
        client.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=30)
        backend.close()
    result = json.loads(out.decode().splitlines()[-1])
    tables = {("ip", "nftproxy"), ("ip6", "nftproxy")}
    handover = {("ip", "nftproxy-handover"), ("ip6", "nftproxy-handover")}
    steps = [(set(g.created_tables()), g.deleted_tables()) for g in gens]
    # each replacement: the handover table loaded, the table replaced in ONE transaction, the handover deleted
    assert steps == [(handover, set()), (tables, tables), (set(), handover)] * REPLACEMENTS, [g.summary() for g in gens]
    assert result["ok"] > REPLACEMENTS, result  # connections ran throughout
    assert result["refused"] == 0 and result["other"] == 0, result
