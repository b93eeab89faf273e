"""Kubernetes API access of our own (besides kopf's watches): initial lists, the Node, writes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import kubernetes
from kubernetes.client.exceptions import ApiException

from nftproxy.operator.rest import Prefetch, paged

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


def request(api: Any, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None) -> Any:
    """One API call, its JSON answer decoded (None when empty); ApiException on an error status.

    Plain REST through the client's connection pool and credentials: the generated API classes
    (CoreV1Api & co.) import ~250 pydantic models on first use, ~1 s at every start."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
    method, url, headers, data, _ = api.param_serialize(
        method,
        path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=data, _request_timeout=30)
    raw = resp.read()
    if not 200 <= resp.status < 300:
        raise ApiException(status=resp.status, reason=resp.reason, body=raw.decode(errors="replace"))
    return json.loads(raw) if raw else None


def pages(
    api: Any, path: str, limit: int = 500, on_version: Callable[[str], None] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """A consistent list, page by page: the caller parses each page and lets it go, so the raw
    objects of the whole list (~10 KB each decoded) are never all in memory at once.
    ``on_version`` gets the list's resourceVersion (one snapshot for every page): a watch
    started there sees every change made after the list, and nothing before."""
    return paged(lambda query: request(api, "GET", path, query), limit, on_version)


def service_pages(api: Any, on_version: Callable[[str], None] | None = None) -> Iterator[list[dict[str, Any]]]:
    return pages(api, "/api/v1/services", on_version=on_version)


def endpoint_slice_pages(api: Any, on_version: Callable[[str], None] | None = None) -> Iterator[list[dict[str, Any]]]:
    return pages(api, "/apis/discovery.k8s.io/v1/endpointslices", on_version=on_version)


def service_cidrs(api: Any) -> list[dict[str, Any]]:
    """Every networking.k8s.io/v1 ServiceCIDR ([] where the API has none: before Kubernetes 1.33)."""
    try:
        return [o for page in pages(api, "/apis/networking.k8s.io/v1/servicecidrs") for o in page]
    except ApiException as e:
        if e.status == 404:
            return []
        raise


def prefetch_lists(api: Any) -> dict[str, Prefetch]:
    """Start the initial lists of Services and EndpointSlices now (see Prefetch)."""
    return {
        "svc": Prefetch(lambda on_version: service_pages(api, on_version)),
        "slice": Prefetch(lambda on_version: endpoint_slice_pages(api, on_version)),
    }


def server_version(api: Any) -> dict[str, Any]:
    """The apiserver's ``/version`` (every authenticated client may read it)."""
    return dict(request(api, "GET", "/version"))


def read_node(api: Any, name: str) -> dict[str, Any] | None:
    try:
        return dict(request(api, "GET", f"/api/v1/nodes/{quote(name)}"))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


GROUP, VERSION, PLURAL = "nftproxy.io", "v1alpha1", "proxystatuses"


def write_proxy_status(api: Any, node: str, node_uid: str | None, status: dict[str, Any]) -> None:
    """Create the node's ProxyStatus if needed (owned by the Node), then patch its status."""
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    owner = (
        [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "blockOwnerDeletion": False}]
        if node_uid
        else []
    )
    try:
        current: Any = request(api, "GET", f"{path}/{quote(node)}")
    except ApiException as e:
        if e.status != 404:
            raise
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyStatus",
            "metadata": {"name": node, "ownerReferences": owner},
            "spec": {"nodeName": node},
        }
        current = request(api, "POST", path, body=body)
    if owner and not current.get("metadata", {}).get("ownerReferences"):
        request(api, "PATCH", f"{path}/{quote(node)}", body={"metadata": {"ownerReferences": owner}})
    request(api, "PATCH", f"{path}/{quote(node)}/status", body={"status": status})


def post_event(api: Any, node: str, kind: str, namespace: str, name: str, reason: str, message: str) -> None:
    """A Warning Event on an object (seen with `kubectl describe`): a Service or EndpointSlice left
    out, or (``kind`` "Node" or "ServiceCIDR", no namespace) a cluster-scoped one, e.g. this node
    with kube-proxy's rules found on it."""
    from datetime import UTC, datetime  # noqa: PLC0415

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    api_version = {"EndpointSlice": "discovery.k8s.io/v1", "ServiceCIDR": "networking.k8s.io/v1"}.get(kind, "v1")
    involved = {"kind": kind, "name": name, "apiVersion": api_version}
    if namespace:
        involved["namespace"] = namespace
    namespace = namespace or "default"  # a cluster-scoped object's Events live in "default"
    body = {
        "metadata": {"generateName": f"{name}.nftproxy-", "namespace": namespace},
        "involvedObject": involved,
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
    request(api, "POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)
