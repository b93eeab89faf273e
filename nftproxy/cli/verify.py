"""``nftproxy verify``: read the API and the kernel, compare them (nftproxy.diagnose.verify), print."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from nftproxy.cli.flags import feature_gates
from nftproxy.compiler import ProxyConfig, features
from nftproxy.diagnose.verify import Report, check, expected, read_kernel
from nftproxy.nft.backend import Backend, NftError
from nftproxy.nft.kernel import KernelBackend
from nftproxy.operator import kube

Objs = list[dict[str, Any]]


def read_api(api: kube.Client, node_name: str) -> tuple[Objs, Objs, dict[str, Any] | None, Objs]:
    """Every Service and EndpointSlice (paged lists), this node's Node (None: not found), and
    the ServiceCIDRs."""
    services = [o for page in kube.service_pages(api) for o in page]
    slices = [o for page in kube.endpoint_slice_pages(api) for o in page]
    return services, slices, kube.read_node(api, node_name), kube.service_cidrs(api)


def with_cluster_gates(api: kube.Client, config: ProxyConfig, overrides: Mapping[str, bool]) -> ProxyConfig:
    """``config`` with the feature gates ``run`` has on this cluster: its version's defaults,
    ``overrides`` (--feature-gates) over them."""
    version = features.parse_version(features.server_version(kube.server_version(api)))
    return config.with_gates(features.enabled(version, overrides))


def verify_once(
    api: kube.Client, backend: Backend, config: ProxyConfig, gates: Mapping[str, bool] = MappingProxyType({})
) -> Report:
    """Read the API, then the kernel, and compare (what changes in between shows as a difference:
    callers checking a live cluster retry, see ``main``'s --wait). The feature gates are those
    ``run`` has on this cluster: its version's defaults (e.g. localhost NodePorts from 1.38), with
    ``gates`` (--feature-gates) over them."""
    config = with_cluster_gates(api, config, gates)
    assert config.node_name
    services, slices, node, cidrs = read_api(api, config.node_name)
    desired, tainted = expected(services, slices, node, config, cidrs)
    return check(desired, read_kernel(backend, config.table), tainted)


def main(args: argparse.Namespace, config: ProxyConfig) -> int:
    """``nftproxy verify``: 0 when the kernel matches the API, 1 with each difference on a line of its
    own, 2 when the check cannot be made (flags, kubeconfig, API or namespace unusable)."""
    if not config.node_name:
        print("nftproxy verify: --node-name (or NODE_NAME) is required", file=sys.stderr)
        return 2
    if args.netns and not os.path.exists(f"/run/netns/{args.netns}"):
        print(f"nftproxy verify: no network namespace {args.netns!r}", file=sys.stderr)
        return 2
    try:
        api = kube.connect(args.kubeconfig)
    except Exception as e:
        print(f"nftproxy verify: cannot use the kubeconfig: {str(e).splitlines()[0] if str(e) else e}", file=sys.stderr)
        return 2
    backend = KernelBackend(args.netns)
    deadline = time.monotonic() + max(0.0, args.wait)
    try:
        while True:
            try:
                report = verify_once(api, backend, config, feature_gates(args))
            except NftError as e:
                print(f"nftproxy verify: cannot read the kernel's table: {e}", file=sys.stderr)
                return 2
            except Exception as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                print(f"nftproxy verify: cannot read the API: {first}", file=sys.stderr)
                return 2
            if not report.differences or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    finally:
        backend.close()
    for note in report.notes:
        print(f"nftproxy verify: note: {note}", file=sys.stderr)
    for d in report.differences:
        print(d)
    if report.differences:
        print(f"nftproxy verify: {len(report.differences)} differences", file=sys.stderr)
        return 1
    print(f"nftproxy verify: in sync: {report.services} Services, {report.elements} elements")
    return 0
