"""The ``explain`` subcommand: read the kernel (and the API), print text or JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from nftproxy.cli.flags import add_proxy_flags, config_from_args, feature_gates
from nftproxy.nft.kernel import KernelBackend
from nftproxy.nft.objects import Family

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser (`run` too)
    from nftproxy.diagnose.explain import Explanation, Frontend
    from nftproxy.diagnose.tableview import TableView
    from nftproxy.nft.listing import CountedElement
    from nftproxy.operator.kube import Client


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("service", metavar="NAMESPACE/NAME")
    p.add_argument("--port", help="only this port (its name or number)")
    p.add_argument("--netns", help="read the tables of this named network namespace")
    p.add_argument("--kubeconfig", help="also compare the kernel with what the API holds now")
    p.add_argument(
        "--api",
        action="store_true",
        help="compare with the API without a kubeconfig: inside the nftproxy pod, with the pod's service account",
    )
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    add_proxy_flags(p)  # the API's objects compile as `run` compiles them: the same flags


def relabel(f: Frontend, svc: dict[str, Any] | None) -> Frontend:
    """The table cannot tell an externalIP from a LoadBalancer IP without source ranges: the API can."""
    if svc is None or f.kind not in ("external IP", "LoadBalancer IP"):
        return f
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    if f.address in {i.get("ip") for i in ingress if isinstance(i, dict)}:
        return replace(f, kind="LoadBalancer IP")
    if f.address in ((svc.get("spec") or {}).get("externalIPs") or []):
        return replace(f, kind="externalIP")
    return f


def read_views(netns: str | None, table: str) -> list[TableView | None]:
    from nftproxy.diagnose.tableview import read_view  # noqa: PLC0415

    backend = KernelBackend(netns)
    try:
        return [read_view(backend, f, table) for f in Family]
    finally:
        backend.close()


def read_counted(netns: str | None, table: str) -> dict[Family, dict[str, list[CountedElement]]]:
    """Each family's counting sets with their counters (--service-counters); a family whose
    table does not count is left out."""
    from nftproxy.diagnose import counters  # noqa: PLC0415

    backend = KernelBackend(netns)
    try:
        listed = {f: backend.counted_elements(f, table, counters.LISTED) for f in Family}
    finally:
        backend.close()
    return {f: els for f, els in listed.items() if counters.counting(els)}


def counter_rows(netns: str | None, table: str, service: str, port: str | None) -> list[dict[str, Any]]:
    """The Service's counts per port, protocol and kind of frontend, per family ([]: not counted)."""
    from nftproxy.diagnose import counters  # noqa: PLC0415

    ns, _, name = service.partition("/")
    rows = []
    for family, listed in read_counted(netns, table).items():
        for k, c in sorted(counters.tally(listed).items()):
            if (k.namespace, k.service) == (ns, name) and port in (None, k.port):
                rows.append({"family": family.value, "port_name": k.port, "protocol": k.protocol, "kind": k.kind,
                             **counters.as_json(c), "text": counters.describe(c)})  # fmt: skip
    return rows


def counters_text(rows: list[dict[str, Any]]) -> str:
    lines = ["", "Counters (--service-counters; externalIPs and LoadBalancer IPs summed as External):"]
    for r in rows:
        port = r["port_name"] or "(unnamed)"
        lines.append(f"  port {port} {r['protocol']}, {r['kind']} [{r['family']}]: {r['text']}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from nftproxy.diagnose.api_check import compare  # noqa: PLC0415
    from nftproxy.diagnose.explain import explain, render_text  # noqa: PLC0415

    if "/" not in args.service:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {args.service!r}")
    views = read_views(args.netns, args.table)
    result: Explanation = explain(views, [f"{f.value} {args.table}" for f in Family], args.service, args.port)
    if args.kubeconfig or args.api:
        from nftproxy.cli.verify import with_cluster_gates  # noqa: PLC0415
        from nftproxy.operator import kube  # noqa: PLC0415  (only when asked)

        api = kube.connect(args.kubeconfig)
        try:
            svc, slices, node, status = fetch(api, args.service, args.node_name)
            config = with_cluster_gates(api, config_from_args(args), feature_gates(args))
        finally:
            api.close()
        check = compare([v for v in views if v is not None], args.service, svc, slices, node, status, config)
        result = replace(result, api=check, frontends=tuple(relabel(f, svc) for f in result.frontends))
    counted = counter_rows(args.netns, args.table, args.service, args.port)
    if args.output == "json":
        doc = dataclasses.asdict(result)
        if counted:  # --service-counters
            doc["counters"] = [{k: v for k, v in r.items() if k != "text"} for r in counted]
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(result) + (counters_text(counted) if counted else ""))
    return 0


def fetch(
    api: Client, service: str, node: str | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], dict[str, Any] | None, dict[str, Any] | None]:
    """(Service, its EndpointSlices, the Node, the node's ProxyStatus) as the API serves them now."""
    from nftproxy.operator import kube  # noqa: PLC0415

    ns, name = (quote(part) for part in service.split("/", 1))
    svc = api.read(f"/api/v1/namespaces/{ns}/services/{name}")
    selector = {"labelSelector": f"kubernetes.io/service-name={service.split('/', 1)[1]}"}
    path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
    slices = [o for page in api.pages(path, query=selector) for o in page]
    node_obj = kube.read_node(api, node) if node else None
    status = api.read(kube.proxy_status_path(node)) if node else None
    return svc, slices, node_obj, status
