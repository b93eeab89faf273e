"""`nftproxy explain` on compiled tables: golden text/JSON, and the API comparison's reasons.

The same explanations are produced from the kernel's tables in tests/netns/test_explain_trace.py
(the kernel's listing must explain exactly like the compiled table).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import replace
from ipaddress import ip_address

import pytest

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.compiler.config import this_node
from nftproxy.diagnose.api_check import compare
from nftproxy.diagnose.explain import Explanation, explain, render_text
from nftproxy.diagnose.tableview import TableView, view_of
from nftproxy.model.manifests import classify, load
from nftproxy.nft.objects import Family
from testkit.k8s import objects as k
from tests.support.golden import CASES, EXTRA, GOLDEN

TABLES = [f"{f.value} nftproxy" for f in Family]


def views(case: str) -> tuple[list[TableView | None], list[str]]:
    source, config = CASES[case]
    inputs = load([str(source)])
    desired = compile_tables(inputs.services, inputs.slices, config, inputs.ignored)
    return [view_of(t) for t in desired.tables], sorted(s.key for s in inputs.services)


def explain_all(vs: list[TableView | None], services: list[str]) -> str:
    out = [render_text(explain(vs, TABLES, key, None)) for key in [*services, *EXTRA]]
    return "\n".join(out)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("case", ["demo-default", "policies", "balancing"])
def test_explain_golden_text(case: str) -> None:
    vs, services = views(case)
    _golden(f"explain-{case}.txt", explain_all(vs, services))


def test_explain_golden_json() -> None:
    vs, _ = views("policies")
    e = explain(vs, TABLES, "default/lb-local", None)
    _golden("explain-lb-local.json", json.dumps(dataclasses.asdict(e), indent=2) + "\n")


def test_port_filter_by_name_and_number() -> None:
    vs, _ = views("demo-default")
    by_name = explain(vs, TABLES, "kube-system/dns", "dns-tcp")
    assert {(f.protocol, f.port) for f in by_name.frontends} == {("tcp", 53)}
    by_number = explain(vs, TABLES, "default/web", "30080")  # a NodePort number: that port's frontends
    assert {f.kind for f in by_number.frontends} >= {"ClusterIP", "NodePort"}
    assert explain(vs, TABLES, "default/web", "81").state == "not-programmed"


def test_no_table_at_all() -> None:
    e = explain([None, None], TABLES, "default/web", None)
    assert e.state == "not-programmed" and "table ip nftproxy and table ip6 nftproxy do(es) not exist" in e.summary


def test_states() -> None:
    vs, _ = views("policies")
    assert explain(vs, TABLES, "default/itp-local", None).state == "no-local-endpoints"
    vs, _ = views("demo-default")
    assert explain(vs, TABLES, "default/empty", None).state == "no-endpoints"
    assert explain(vs, TABLES, "default/web", None).state == "programmed"


# -- against the API (pure: the API's objects as dicts) --------------------------------------

SVC = k.service("web", ["10.96.0.10"], [k.port(80, "http")])
SLICE = k.endpoint_slice("web-1", "web", [k.endpoint("10.244.1.2"), k.endpoint("10.244.1.3")], [k.port(8080, "http")])


def _kernel(objs: list[k.Obj]) -> list[TableView]:
    from nftproxy.model.manifests import classify  # noqa: PLC0415

    inputs = classify(objs)
    return [view_of(t) for t in compile_tables(inputs.services, inputs.slices, CASES["policies"][1]).tables]


def _check(kernel: list[TableView], svc: k.Obj | None, slices: list[k.Obj], status: k.Obj | None = None) -> Explanation:
    config = replace(CASES["policies"][1], node_zone=None)
    e = explain(list(kernel), TABLES, "default/web", None)
    return replace(e, api=compare(kernel, "default/web", svc, slices, None, status, config))


def test_api_matches() -> None:
    e = _check(_kernel([SVC, SLICE]), SVC, [SLICE])
    assert e.api is not None and e.api.matches and not e.api.missing and not e.api.extra, e.api


def test_api_endpoint_added_is_sync_pending() -> None:
    newer = k.endpoint_slice("web-1", "web", [k.endpoint(a) for a in ("10.244.1.2", "10.244.1.3", "10.244.1.4")],
                             [k.port(8080, "http")])  # fmt: skip
    e = _check(_kernel([SVC, SLICE]), SVC, [newer])
    assert e.api is not None and not e.api.matches
    assert any("10.244.1.4" in x for x in e.api.missing), e.api
    assert any(x.startswith("service-ips") for x in e.api.extra)  # goto cluster-2 -> cluster-3
    assert any(r.startswith("sync pending") for r in e.api.reasons), e.api.reasons


def test_api_other_proxy_and_invalid_and_deleted() -> None:
    kernel = _kernel([SVC, SLICE])
    other = json.loads(json.dumps(SVC))
    other["metadata"]["labels"] = {"service.kubernetes.io/service-proxy-name": "kube-proxy"}
    e = _check(kernel, other, [SLICE])
    assert e.api is not None and not e.api.matches
    assert any(r.startswith("not ours") and "kube-proxy" in r for r in e.api.reasons), e.api.reasons
    bad = json.loads(json.dumps(SVC))
    bad["spec"]["ports"][0]["port"] = 0
    e = _check(kernel, bad, [SLICE])
    assert e.api is not None
    assert any("invalid, nftproxy skips it" in r for r in e.api.reasons), e.api.reasons
    e = _check(kernel, None, [])
    assert e.api is not None
    assert any("does not exist in the API" in r for r in e.api.reasons)


def test_api_reason_from_proxystatus() -> None:
    reason = (
        "10.96.0.10 . tcp . 80 is left out for this Service: it is the ClusterIP of Service default/aaa; its other "
        "frontends are programmed"
    )
    status = {"status": {"skipped": [{"kind": "Service", "namespace": "default", "name": "web", "reason": reason}]}}
    config = replace(CASES["policies"][1], node_zone=None)
    check = compare([], "default/web", SVC, [SLICE], None, status, config)
    assert not check.matches and any("ClusterIP of Service default/aaa" in r for r in check.reasons), check


def test_the_api_tells_external_ips_from_load_balancer_ips() -> None:
    from nftproxy.cli.explain import relabel  # noqa: PLC0415

    vs, _ = views("demo-default")
    web = explain(vs, TABLES, "default/web", None)
    obj = k.service("web", ["10.96.0.10"], [k.port(80, "http")], external_ips=["198.19.0.20"], lb_ips=["198.19.0.10"])
    kinds = {f.address: relabel(f, obj).kind for f in web.frontends}
    assert kinds.get("198.19.0.20", "externalIP") == "externalIP"
    assert kinds.get("198.19.0.10", "LoadBalancer IP") == "LoadBalancer IP"
    assert kinds["10.96.0.10"] == "ClusterIP"
    f = next(f for f in web.frontends if f.kind == "ClusterIP")
    assert relabel(replace(f, kind="external IP", address="198.19.0.20"), obj).kind == "externalIP"
    assert relabel(replace(f, kind="external IP", address="198.19.0.10"), obj).kind == "LoadBalancer IP"


@pytest.mark.parametrize("algorithm", ["source-hash", "round-robin"])
def test_api_matches_on_a_node_that_balances_by_another_algorithm(algorithm: str) -> None:
    """A node running `--load-balancing source-hash` holds `endpoints-sh-2`, not `endpoints-2`:
    the API's objects must compile with the node's config, the Node merged in (not a config
    rebuilt from three of its fields, which said "does NOT match")."""
    config = ProxyConfig(node_name="node-1", node_ips=(ip_address("198.18.0.1"),), load_balancing=algorithm)
    node = {
        "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.1"}]},
    }
    inputs = classify([SVC, SLICE])
    merged = config.for_node(this_node(classify([node]).nodes, "node-1"))
    kernel = [view_of(t) for t in compile_tables(inputs.services, inputs.slices, merged).tables]
    check = compare(kernel, "default/web", SVC, [SLICE], node, None, config)
    assert check.matches and not check.missing and not check.extra, check


def test_explain_takes_the_flags_run_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    from nftproxy.cli import build_parser  # noqa: PLC0415
    from nftproxy.cli.flags import config_from_args  # noqa: PLC0415

    monkeypatch.delenv("NFTPROXY_LOAD_BALANCING", raising=False)
    args = build_parser().parse_args(["explain", "default/web", "--load-balancing", "source-hash"])
    assert config_from_args(args).load_balancing == "source-hash"
    monkeypatch.setenv("NFTPROXY_LOAD_BALANCING", "round-robin")  # as the chart sets it in the pod
    for command in (["explain", "default/web"], ["render", "-f", "x.yaml"], ["run"], ["verify"]):
        assert config_from_args(build_parser().parse_args(command)).load_balancing == "round-robin", command
