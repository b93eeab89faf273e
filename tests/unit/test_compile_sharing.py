"""A compiled Service is mostly references to what every Service of its shape shares (the goto
values, the per-count object sets, the empty sets), its endpoints are its endpoint map's own slot
tuples, and the common port (one slice, every endpoint ready, no topology hint) is compiled in
one pass that gives what the general path gives (docs/performance.md; tests/fuzz checks the two
paths agree on random objects)."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

from nftproxy.compiler import compile_tables, fragment, names
from nftproxy.compiler.fragment import Fragment, compile_fragment
from nftproxy.model.types import EndpointSlice, Service
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.builders import CFG


def _service(i: int, node_port: bool = False) -> Service:
    obj = k.service(
        f"s{i}", [f"10.96.0.{i + 1}"], [k.port(80, "http", node_port=30000 + i if node_port else None)],
        type="NodePort" if node_port else "ClusterIP",
    )  # fmt: skip
    s = k.parsed(obj)
    assert isinstance(s, Service), s
    return s


def _slice(i: int, n: int, **endpoint: object) -> EndpointSlice:
    eps = [k.endpoint(f"10.244.{i}.{j + 1}", node=f"n{j % 2}", **endpoint) for j in range(n)]  # type: ignore[arg-type]
    obj = k.endpoint_slice(f"s{i}-a", f"s{i}", eps, [k.port(8080, "http")])
    es = k.parsed(obj)
    assert isinstance(es, EndpointSlice), es
    return es


def _compiled(i: int, slices: Sequence[EndpointSlice], node_port: bool = False) -> Fragment:
    frag = compile_fragment(_service(i, node_port), slices, Family.IP, CFG)
    assert frag is not None
    return frag


def test_services_of_one_shape_share_their_values_and_object_sets() -> None:
    a, b = _compiled(1, [_slice(1, 3)], node_port=True), _compiled(2, [_slice(2, 3)], node_port=True)
    values_a = {s: el.value for s, el in a.elements if el.value is not None}
    values_b = {s: el.value for s, el in b.elements if el.value is not None}
    assert values_a[names.SERVICE_IPS] == ("goto cluster-3",)
    assert values_a.keys() == values_b.keys()
    assert all(values_a[s] is values_b[s] for s in values_a), "one value tuple per chain, shared"
    assert a.objects == {("lb", 3), ("nodeport", 3)}
    assert a.objects is b.objects, "one frozenset per set of per-count objects"
    assert not a.shared and a.shared is b.shared, "an empty set is one shared empty frozenset"


def test_a_services_endpoints_are_its_endpoint_maps_slot_tuples() -> None:
    frag = _compiled(1, [_slice(1, 4)])
    ((map_name, key, slots),) = frag.spreads
    assert (map_name, key) == ("endpoints-4", ("10.96.0.2", "tcp", "80"))
    assert slots == tuple((f"10.244.1.{j}", "8080") for j in range(1, 5))
    assert frag.endpoints is slots, "no second copy of the endpoint list"
    assert frag.local_endpoints == {"10.244.1.2", "10.244.1.4"}  # node n1's


def test_the_common_port_takes_the_one_pass_and_others_the_general_path() -> None:
    taken: list[bool] = []
    one_pass = fragment._plain

    def spy(*args: object) -> object:
        out = one_pass(*args)  # type: ignore[arg-type]
        taken.append(out is not None)
        return out

    with mock.patch.object(fragment, "_plain", spy):
        _compiled(1, [_slice(1, 3)])
        _compiled(2, [_slice(2, 3, ready=False, serving=True, terminating=True)])  # none ready
        _compiled(3, [_slice(3, 2), _slice(4, 2)])  # two slices
    assert taken == [True, False, False]


def test_the_one_pass_compiles_what_the_general_path_compiles() -> None:
    services = [_service(i, node_port=i % 2 == 0) for i in range(6)]
    slices = [_slice(i, 1 + i) for i in range(5)] + [_slice(5, 3, ready=False, serving=True, terminating=True)]
    fast = compile_tables(services, slices, CFG)
    with mock.patch.object(fragment, "_plain", lambda *_: None):
        general = compile_tables(services, slices, CFG)
    assert fast == general
    assert fast.tables[0].elements[names.HAIRPIN_ENDPOINTS], "this node's endpoints are hairpinned"
