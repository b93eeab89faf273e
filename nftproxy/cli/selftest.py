"""``nftproxy selftest``: what `helm test` runs in a pod of the cluster. A Service answers through
the node's proxy (``--service HOST:PORT``, a ClusterIP Service whose endpoints are the nftproxy
pods' /healthz), and every Node's ProxyStatus says InSync. Exit 0 when both hold, 1 otherwise;
one line per check."""

from __future__ import annotations

import argparse
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser (`run` too)
    from nftproxy.operator.kube import Client


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--service", required=True, metavar="HOST:PORT", help="a ClusterIP Service to GET /healthz through")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig; in-cluster config when absent")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for both checks")


def _service(target: str) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(f"http://{target}/healthz", timeout=5) as r:
            return r.status == 200, f"GET http://{target}/healthz: {r.status}"
    except urllib.error.HTTPError as e:
        return False, f"GET http://{target}/healthz: {e.code}"
    except OSError as e:
        return False, f"GET http://{target}/healthz: {e}"


def _in_sync(api: Client) -> tuple[bool, list[str]]:
    from nftproxy.operator import kube  # noqa: PLC0415

    nodes = [n["metadata"]["name"] for page in api.pages("/api/v1/nodes") for n in page]
    lines, ok = [], bool(nodes)
    for name in sorted(nodes):
        try:
            st = api.request("GET", kube.proxy_status_path(name))
        except Exception as e:
            ok = False
            lines.append(f"node {name}: no ProxyStatus ({str(e).splitlines()[0] if str(e) else e})")
            continue
        conds = {c.get("type"): c for c in (st.get("status") or {}).get("conditions") or []}
        sync = conds.get("InSync") or {}
        good = sync.get("status") == "True"
        ok = ok and good
        lines.append(f"node {name}: InSync={sync.get('status', '?')} {sync.get('message', '')}".rstrip())
    return ok, lines or ["no Nodes"]


def run(args: argparse.Namespace) -> int:
    from nftproxy.operator import kube  # noqa: PLC0415

    api = kube.connect(args.kubeconfig)
    deadline = time.monotonic() + args.timeout
    while True:
        svc_ok, svc_line = _service(args.service)
        sync_ok, sync_lines = _in_sync(api)
        if (svc_ok and sync_ok) or time.monotonic() >= deadline:
            break
        time.sleep(2)
    for line in (svc_line, *sync_lines):
        print(line)
    print("nftproxy selftest: " + ("passed" if svc_ok and sync_ok else "FAILED"))
    return 0 if svc_ok and sync_ok else 1
