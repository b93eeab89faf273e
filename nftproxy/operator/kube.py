"""Kubernetes API access of our own (besides kopf's watches): initial lists, the Node, writes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

import kubernetes
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("nftproxy.kube")


def api_client(kubeconfig: str | None) -> Any:
    """An ApiClient from the kubeconfig, or the in-cluster service account when None."""
    cfg = kubernetes.client.Configuration()
    if kubeconfig:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.retries = False  # tenacity decides
    return kubernetes.client.ApiClient(cfg)


def pages(
    call: Callable[..., Any], limit: int = 500, on_version: Callable[[str], None] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """A consistent list, page by page: the caller parses each page and lets it go, so the raw
    objects of the whole list (~10 KB each decoded) are never all in memory at once.
    ``on_version`` gets the list's resourceVersion (one snapshot for every page): a watch
    started there sees every change made after the list, and nothing before."""
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": limit, "_preload_content": False, "_request_timeout": 30}
        if token:
            kwargs["_continue"] = token
        page = json.loads(call(**kwargs).data)
        meta = page.get("metadata") or {}
        if on_version is not None and not token and meta.get("resourceVersion"):
            on_version(str(meta["resourceVersion"]))
        yield page.get("items") or []
        token = meta.get("continue")
        if not token:
            return


def service_pages(api: Any, on_version: Callable[[str], None] | None = None) -> Iterator[list[dict[str, Any]]]:
    return pages(kubernetes.client.CoreV1Api(api).list_service_for_all_namespaces, on_version=on_version)


def endpoint_slice_pages(api: Any, on_version: Callable[[str], None] | None = None) -> Iterator[list[dict[str, Any]]]:
    return pages(kubernetes.client.DiscoveryV1Api(api).list_endpoint_slice_for_all_namespaces, on_version=on_version)


def read_node(api: Any, name: str) -> dict[str, Any] | None:
    try:
        resp: Any = kubernetes.client.CoreV1Api(api).read_node(name, _preload_content=False, _request_timeout=30)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return dict(json.loads(resp.data))


GROUP, VERSION, PLURAL = "nftproxy.io", "v1alpha1", "proxystatuses"


def write_proxy_status(api: Any, node: str, node_uid: str | None, status: dict[str, Any]) -> None:
    """Create the node's ProxyStatus if needed (owned by the Node), then patch its status."""
    co = kubernetes.client.CustomObjectsApi(api)
    owner = (
        [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "blockOwnerDeletion": False}]
        if node_uid
        else []
    )
    try:
        current: Any = co.get_cluster_custom_object(GROUP, VERSION, PLURAL, node, _request_timeout=30)
    except ApiException as e:
        if e.status != 404:
            raise
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyStatus",
            "metadata": {"name": node, "ownerReferences": owner},
            "spec": {"nodeName": node},
        }
        current = co.create_cluster_custom_object(GROUP, VERSION, PLURAL, body, _request_timeout=30)
    if owner and not current.get("metadata", {}).get("ownerReferences"):
        co.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, node, {"metadata": {"ownerReferences": owner}}, _request_timeout=30
        )
    co.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, node, {"status": status}, _request_timeout=30)


def post_event(api: Any, node: str, kind: str, namespace: str, name: str, reason: str, message: str) -> None:
    """A Warning Event on the object that was left out (seen with `kubectl describe`)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api_version = "v1" if kind == "Service" else "discovery.k8s.io/v1"
    body = {
        "metadata": {"generateName": f"{name}.nftproxy-", "namespace": namespace},
        "involvedObject": {"kind": kind, "namespace": namespace, "name": name, "apiVersion": api_version},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "nftproxy", "host": node},
        "reportingComponent": "nftproxy",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    kubernetes.client.CoreV1Api(api).create_namespaced_event(namespace, cast(Any, body), _request_timeout=30)
