"""The first lists of ``nftproxy run``, started before anything heavy is imported.

``python -m nftproxy run …`` (what the chart and the benchmarks run) calls ``start`` first: from
the command line, ``--config``'s file and the environment alone (``--kubeconfig``, the file's
kubeconfig, ``KUBECONFIG``; ``--node-name``, its hostnameOverride, ``NODE_NAME``;
``--service-proxy-name``, ``NFTPROXY_SERVICE_PROXY_NAME``), with our client
(``kube``: the standard library), it starts the four GETs of the first sync (``boot``) in
threads, so the apiserver works while the compiler, the dataplane and the rest import (~0.1-0.2
s). ``cmd_run`` then takes them with ``take`` only if argparse read the same values (else they
are dropped, and listed again): a pure head start, never a different result.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from nftproxy import heap
from nftproxy.operator import kube
from nftproxy.operator.kube import Prefetch


def _in_thread(fn: Callable[[], Any]) -> Future[Any]:
    done: Future[Any] = Future()

    def go() -> None:
        try:
            done.set_result(fn())
        except BaseException as e:
            done.set_exception(e)

    threading.Thread(target=go, daemon=True, name="first-get").start()
    return done


@dataclass
class Lists:
    """The first lists, under way (each in a thread of its own, decoded there), and the client
    that makes them (the operator's, for everything after)."""

    api: kube.Client
    services: Prefetch
    slices: Prefetch
    node: Future[dict[str, Any] | None]
    cidrs: Future[list[dict[str, Any]]]
    version: Future[dict[str, Any]]  # the apiserver's /version: the feature gates' defaults


def lists(api: kube.Client, node_name: str, proxy_name: str | None = None) -> Lists:
    """Start the five requests now (the Services and EndpointSlices selected as our watches
    select them: ``proxy_name``, --service-proxy-name)."""
    options = kube.service_options(proxy_name)
    return Lists(
        api=api,
        services=Prefetch(lambda on_version: kube.service_pages(api, on_version, options)),
        slices=Prefetch(lambda on_version: kube.endpoint_slice_pages(api, on_version, kube.SLICE_OPTIONS)),
        node=_in_thread(lambda: kube.read_node(api, node_name)),
        cidrs=_in_thread(lambda: kube.service_cidrs(api)),
        version=_in_thread(lambda: kube.server_version(api)),
    )


_started: dict[tuple[str | None, str, str | None], Lists] = {}  # (kubeconfig, node, proxy name) -> lists


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The last ``--name VALUE`` or ``--name=VALUE`` (argparse's last one wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _from_config_file(path: str | None) -> tuple[str | None, str | None]:
    """kube-proxy's configuration file's kubeconfig and node name (hostnameOverride), if any."""
    if not path:
        return None, None
    import yaml  # noqa: PLC0415  (only with --config)

    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    kubeconfig = (doc.get("clientConnection") or {}).get("kubeconfig") or None
    node = str(doc.get("hostnameOverride") or "").strip().lower() or None
    return kubeconfig, node


def start(argv: Sequence[str]) -> None:
    """For ``run`` only; never raises (whatever goes wrong here, ``cmd_run`` does it again)."""
    if not argv or argv[0] != "run":
        return
    try:
        # as argparse and --config's file will decide: a flag, else the file, else the environment
        from_file = _from_config_file(_flag(argv, "--config") or os.environ.get("NFTPROXY_CONFIG"))
        kubeconfig = _flag(argv, "--kubeconfig") or from_file[0] or os.environ.get("KUBECONFIG") or None
        node = _flag(argv, "--node-name") or from_file[1] or os.environ.get("NODE_NAME")
        if not node:
            return
        proxy_name = _flag(argv, "--service-proxy-name") or os.environ.get("NFTPROXY_SERVICE_PROXY_NAME") or None
        heap.tune()  # before the first thread
        _started[kubeconfig, node, proxy_name] = lists(kube.connect(kubeconfig), node, proxy_name)
    except Exception:  # whatever it is, cmd_run meets it again (and says it)
        return


def take(kubeconfig: str | None, node: str, proxy_name: str | None = None) -> Lists | None:
    """The lists ``start`` began, if for these settings (once)."""
    found = _started.pop((kubeconfig, node, proxy_name), None)
    _started.clear()
    return found
