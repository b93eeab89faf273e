"""``explain --kubeconfig``: does the kernel hold what the API's objects compile to, and why not?

The Service, its EndpointSlices and this node are read from the API now and compiled with
``compile_tables`` (the same pure function the syncer uses); the Service's elements in that
result are compared with its elements in the kernel. Reasons for a difference come from the
parse (skipped, ignored, another proxy's label) and from the node's ProxyStatus (skipped with a
reason, sync failing or pending).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nftproxy.compiler import ProxyConfig, compile_tables
from nftproxy.diagnose.explain import ApiCheck, render_element, service_elements
from nftproxy.diagnose.tableview import TableView, view_of
from nftproxy.model.parse import PROXY_NAME_LABEL, Ignored, parse_endpoint_slice, parse_node, parse_service
from nftproxy.model.types import EndpointSlice, Node, Service, Skipped


def compare(
    kernel: Sequence[TableView],
    service: str,
    svc_obj: dict[str, Any] | None,
    slice_objs: Sequence[dict[str, Any]],
    node_obj: dict[str, Any] | None,
    status: dict[str, Any] | None,
    config: ProxyConfig,
) -> ApiCheck:
    have = {render_element(s, e) for v in kernel for s, e in service_elements(v, service)}
    reasons: list[str] = []
    parsed: Service | Skipped | Ignored | None = None
    if svc_obj is None:
        reasons.append("the Service does not exist in the API (deleted?)")
    else:
        parsed = parse_service(svc_obj, config.service_proxy_name)
        labels = (svc_obj.get("metadata") or {}).get("labels") or {}
        if isinstance(parsed, Skipped):
            reasons.append(f"the API's Service is invalid, nftproxy skips it: {parsed.reason}")
        elif isinstance(parsed, Ignored):
            label = labels.get(PROXY_NAME_LABEL)
            if label is not None or config.service_proxy_name:
                reasons.append(
                    f"not ours: {parsed.reason} (another proxy's Service; this node's nftproxy handles "
                    f"{PROXY_NAME_LABEL}={config.service_proxy_name!r} only)"
                    if config.service_proxy_name
                    else f"not ours: {parsed.reason} (another proxy's Service)"
                )
            else:
                reasons.append(f"not proxied: {parsed.reason}")
    slices: list[EndpointSlice] = []
    for obj in slice_objs:
        s = parse_endpoint_slice(obj)
        if isinstance(s, EndpointSlice):
            slices.append(s)
        elif isinstance(s, Skipped):
            reasons.append(f"EndpointSlice {s.namespace}/{s.name} is invalid, nftproxy skips it: {s.reason}")
    if node_obj is not None:
        node = parse_node(node_obj)
        if isinstance(node, Node):
            config = config.for_node(node)
    want: set[str] = set()
    if isinstance(parsed, Service):
        desired = compile_tables([parsed], slices, config)
        want = {render_element(s, e) for t in desired.tables for s, e in service_elements(view_of(t), service)}
        reasons += [f"{x.kind} {x.namespace}/{x.name}: {x.reason}" for x in desired.skipped if x.kind == "Service"]
    missing = sorted(want - have)
    extra = sorted(have - want)
    matches = not missing and not extra
    reasons += _status_reasons(status, service, config.node_name, matches)
    if not matches and not any(r.startswith(("the API", "not ours", "not proxied", "EndpointSlice")) for r in reasons):
        reasons.append("sync pending: the API changed after the last sync (or nftproxy is not running on this node)")
    return ApiCheck(matches, tuple(reasons), tuple(missing), tuple(extra))


def _status_reasons(status: dict[str, Any] | None, service: str, node: str | None, matches: bool) -> list[str]:
    if node is None:
        return ["(no --node-name: this node's ProxyStatus was not read)"] if not matches else []
    if status is None:
        return [f"no ProxyStatus {node}: nftproxy has never reported from this node"]
    st = status.get("status") or {}
    out: list[str] = []
    ns, name = service.split("/", 1)
    for x in st.get("skipped") or []:
        mine = x.get("name") == name if x.get("kind") == "Service" else name in str(x.get("name", ""))
        if x.get("namespace") == ns and mine:
            out.append(f"ProxyStatus {node}: skipped {x.get('kind')} {ns}/{x.get('name')}: {x.get('reason')}")
    for c in st.get("conditions") or []:
        if c.get("type") == "InSync" and c.get("status") != "True":
            out.append(f"ProxyStatus {node}: InSync {c.get('status')} ({c.get('reason')}): {c.get('message')}")
    if not matches and st.get("lastSyncTime"):
        out.append(f"ProxyStatus {node}: last sync {st.get('lastSyncTime')}")
    return out
