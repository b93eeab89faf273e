"""Random API objects, valid and invalid: never an exception out of parse or compile; every invalid
object skipped with a reason naming it; every valid Service compiled (or reported as conflicting);
every compiled table accepted by the kernel (libnftables check mode, in a namespace of our own)."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import ip_address, ip_network
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nftproxy.cli import with_node_ips
from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.compiler.fragment import _short
from nftproxy.model.parse import Ignored, parse_endpoint_slice, parse_node, parse_service
from nftproxy.model.types import EndpointSlice, Node, Service, Skipped
from nftproxy.nft.diff import plan
from nftproxy.nft.objects import Family
from tests.fuzz import strategies as S
from tests.fuzz.conftest import DryRun, examples

CONFIGS = [
    ProxyConfig(node_name="n1", cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:10:244::/48"))),
    ProxyConfig(node_name="n1", masquerade_all=True, nodeport_addresses=(ip_network("198.18.0.0/24"),)),
    ProxyConfig(node_name="n2", node_ips=(ip_address("198.18.0.2"),), service_proxy_name="nftproxy"),
    ProxyConfig(),
]


def _expected_name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    raw = meta.get("name") if isinstance(meta, Mapping) else None
    return str(raw) if raw else "?"


Parsed = Service | EndpointSlice | Node | Skipped | Ignored


def parse(obj: Any, config: ProxyConfig) -> Parsed:
    kind = obj.get("kind")
    if kind == "Service":
        return parse_service(obj, config.service_proxy_name)
    if kind == "EndpointSlice":
        return parse_endpoint_slice(obj)
    return parse_node(obj)


def split(objs: list[Any], config: ProxyConfig) -> tuple[list[Service], list[EndpointSlice], list[Node], list[str]]:
    services, slices, nodes, ignored = [], [], [], []
    for obj in objs:
        r = parse(obj, config)
        if isinstance(r, Service):
            services.append(r)
        elif isinstance(r, EndpointSlice):
            slices.append(r)
        elif isinstance(r, Node):
            nodes.append(r)
        elif isinstance(r, Ignored) and obj["kind"] == "Service":
            meta = obj["metadata"]
            ignored.append(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
    return services, slices, nodes, ignored


objects = st.lists(st.one_of(S.service(), S.service(), S.endpoint_slice(), S.endpoint_slice(), S.node()), max_size=25)


@settings(max_examples=examples(300, 5000))
@given(obj=st.one_of(S.service(), S.endpoint_slice(), S.node()), cfg=st.sampled_from(CONFIGS))
def test_parse_never_raises_and_names_what_it_skips(obj: dict[str, Any], cfg: ProxyConfig) -> None:
    r = parse(obj, cfg)
    assert isinstance(r, Service | EndpointSlice | Node | Skipped | Ignored)
    if isinstance(r, Skipped):
        assert r.kind == obj["kind"]
        assert r.reason
        assert r.name == _expected_name(obj), r
        assert str(r).startswith(f"{r.kind} "), r
    if isinstance(r, Ignored):
        assert r.reason
    if isinstance(r, Service | EndpointSlice):
        hash(r)  # every parsed object is usable as a cache value (frozen, hashable fields)


def _compiled(objs: list[Any], cfg: ProxyConfig) -> tuple[Any, list[Service], ProxyConfig]:
    services, slices, nodes, ignored = split(objs, cfg)
    cfg = with_node_ips(cfg, nodes)
    desired = compile_tables(services, slices, cfg, ignored)
    return desired, services, cfg


def _present(desired: Any, svc: Service) -> bool:
    """The Service's first port on its first ClusterIP is in a dispatch map, under its name."""
    ip = svc.cluster_ips[0]
    family = Family.IP if ip.version == 4 else Family.IP6
    table = next(t for t in desired.tables if t.family == family)
    p = svc.ports[0]
    key = (str(ip), p.protocol.lower(), str(p.port))
    comment = _short(f"{svc.key}:{p.name}" if p.name else svc.key)
    for name in ("service-ips", "no-endpoint-services"):
        el = table.elements[name].get(key)
        if el is not None and el.comment == comment:
            return True
    return False


@settings(max_examples=examples(150, 3000))
@given(objs=objects, cfg=st.sampled_from(CONFIGS))
def test_compile_never_raises_and_compiles_every_valid_service(objs: list[Any], cfg: ProxyConfig) -> None:
    desired, services, cfg = _compiled(objs, cfg)
    conflicting = {f"{s.namespace}/{s.name}" for s in desired.skipped if s.kind == "Service"}
    for s in desired.skipped:
        assert s.reason and s.name, s
    by_key = {s.key: s for s in services}  # the last of duplicates (same key) is the one compiled
    for key, svc in by_key.items():
        assert _present(desired, svc) or key in conflicting, f"{key} neither compiled nor reported"


@pytest.mark.netns
@settings(max_examples=examples(60, 1500))
@given(objs=objects, cfg=st.sampled_from(CONFIGS))
def test_every_compiled_table_is_accepted_by_the_kernel(dry_run: DryRun, objs: list[Any], cfg: ProxyConfig) -> None:
    desired, _, _ = _compiled(objs, cfg)
    script = "".join(plan(None, t).render() for t in desired.tables)
    rc, err = dry_run.check(script)
    assert rc == 0, f"the kernel refused a compiled table: {err.strip()[:2000]}"
