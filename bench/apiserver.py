"""Shared by the benchmarks: the objects they create in a real kube-apiserver, created through the
API (``create_many``) or written straight into etcd the way the API stores them (``import_many``)."""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from nftproxy.operator import kube
from testkit.k8s import objects
from testkit.k8s.controlplane import ControlPlane

NS = "bench"


# The probed Service has its own endpoint count, so its map (endpoints-3) holds only its elements:
# `nft get element` on it stays cheap and the polling does not slow the proxy it measures.
PROBE_ENDPOINTS = 3


CRD = Path(__file__).resolve().parents[1] / "charts" / "nftproxy" / "crds" / "proxystatus.yaml"


def prepare(cp: ControlPlane, *nodes: str) -> None:
    """What every bench's control plane holds first: the ProxyStatus CRD, the namespace, and the
    proxies' Nodes (InternalIP 198.18.0.1 for the first, .2 for the next...)."""
    cp.kubectl("apply", "-f", str(CRD))
    cp.kubectl("create", "namespace", NS)
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
              "status": {"addresses": [{"type": "InternalIP", "address": str(IPv4Address("198.18.0.1") + k)}]}}
             for k, node in enumerate(nodes)]  # fmt: skip
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


PROBE_BASE = 1_000_000  # indexes of probed Services


# The control plane's Service range for the benches: 10.96.0.0/15, room for 100k Services and more
# (the tests' /16 holds 65,534); see cluster_ip.
SERVICE_RANGE = "10.96.0.0/15,fd00:10:96::/112"


BULK_LOW = 249 * 256  # bulk Services in 10.96.1.0-10.96.249.255; the next ones in 10.97.0.0/16


AT_START_BASE = PROBE_BASE + 100  # indexes of the Services created 1 s after a start


AT_START_ENDPOINTS = 5  # their own endpoint count: their own map, cheap to poll


def cluster_ip(i: int) -> str:
    """10.96.1.0 on for the bulk (63,744 of them fit below the probes' 10.96.250.0: 50k Services
    included), then 10.97.0.0 on (SERVICE_RANGE: 100k included); 10.96.250.0 on for the probes."""
    assert i < BULK_LOW + 65536 or i >= PROBE_BASE, i
    if i >= PROBE_BASE:
        return str(IPv4Address("10.96.250.0") + i - PROBE_BASE)
    return str(IPv4Address("10.96.1.0") + i if i < BULK_LOW else IPv4Address("10.97.0.0") + i - BULK_LOW)


def service(i: int) -> dict[str, Any]:
    return objects.service(f"s{i}", [cluster_ip(i)], [objects.port(80, "http")], namespace=NS)


def endpoint_slice(i: int, endpoints: int, salt: int = 0) -> dict[str, Any]:
    base = int(IPv4Address("10.128.0.0")) + i * endpoints
    eps = [objects.endpoint(str(IPv4Address(base + j + salt)), node=f"n{j % 50}") for j in range(endpoints)]
    return objects.endpoint_slice(f"s{i}-x", f"s{i}", eps, [objects.port(8080, "http")], namespace=NS)


def create_many(api: kube.Client, start: int, stop: int, endpoints: int, threads: int = 16) -> None:
    """Services ``start``..``stop``-1 and their EndpointSlices, created by ``threads`` threads
    through our client (keep-alive connections, plain JSON POSTs: half the client CPU of the
    generated CoreV1Api, measured). kube-apiserver's CPU is the limit: ~1.7 ms per object at
    first (2.8 s of its CPU for 1.6k objects, 0.6 s of etcd's), growing with the number of
    Services (its ClusterIP allocator): 50k Services + slices took 16 minutes, ~300 Services/s at
    first, ~30/s at 48k. For a big bulk, import_many."""

    def post(path: str, body: dict[str, Any]) -> None:
        for attempt in range(5):
            try:
                api.request("POST", path, body=body)
                return
            except kube.ApiError as e:
                if e.status == 409:  # already there (e.g. a retried request that had gone through)
                    return
                if e.status != 429 and e.status < 500:
                    raise
            except (OSError, http.client.HTTPException):
                if attempt == 4:
                    raise
            time.sleep(0.5)
        raise RuntimeError(f"POST {path}: still failing")

    def one(i: int) -> None:
        post(f"/api/v1/namespaces/{NS}/services", service(i))
        post(f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", endpoint_slice(i, endpoints))

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(start, stop)))


def _managed(api_version: str, now: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
    """metadata.managedFields as the apiserver writes it for a create by this client."""
    return [{"manager": "unknown", "operation": "Update", "apiVersion": api_version, "time": now,
             "fieldsType": "FieldsV1", "fieldsV1": fields}]  # fmt: skip


def stored(i: int, endpoints: int, now: str) -> list[tuple[str, dict[str, Any]]]:
    """Service ``i``, its EndpointSlice and its ClusterIP's IPAddress as kube-apiserver stores
    them after a create through the API (defaults and managedFields included, so the lists the
    proxy reads are the same bytes), by etcd key."""
    svc, sl = service(i), endpoint_slice(i, endpoints)
    ip = cluster_ip(i)
    svc["metadata"] |= {"uid": str(uuid.uuid4()), "creationTimestamp": now}
    svc["metadata"]["managedFields"] = _managed("v1", now, {"f:spec": {
        "f:clusterIP": {}, "f:internalTrafficPolicy": {}, "f:sessionAffinity": {}, "f:type": {},
        "f:ports": {".": {}, 'k:{"port":80,"protocol":"TCP"}': {
            ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}}}})  # fmt: skip
    svc["spec"] = {"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 80}], "clusterIP": ip,
                   "clusterIPs": [ip], "type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": ["IPv4"],
                   "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"}  # fmt: skip
    svc["status"] = {"loadBalancer": {}}
    sl["metadata"] |= {"uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": now}
    sl["metadata"]["managedFields"] = _managed("discovery.k8s.io/v1", now, {
        "f:addressType": {}, "f:endpoints": {}, "f:ports": {},
        "f:metadata": {"f:labels": {".": {}, "f:kubernetes.io/service-name": {}}}})  # fmt: skip
    address = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip, "uid": str(uuid.uuid4()), "creationTimestamp": now,
            "labels": {"ipaddress.kubernetes.io/ip-family": "IPv4",
                       "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io"},
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": NS, "name": f"s{i}"}},
    }  # fmt: skip
    return [
        (f"/registry/services/specs/{NS}/s{i}", svc),
        (f"/registry/endpointslices/{NS}/s{i}-x", sl),
        (f"/registry/ipaddresses/{ip}", address),
    ]


def import_many(cp: ControlPlane, start: int, stop: int, endpoints: int, threads: int = 4) -> None:
    """Like create_many, written straight into etcd (transactions of 60-120 puts, JSON: the
    apiserver reads JSON and protobuf alike), its watch caches following through their etcd
    watches. Through the API, each create costs kube-apiserver time that grows with the number
    of Services (the ClusterIP allocator): 100k objects took 16 minutes (the rate fell from
    ~300 to ~30 Services/s by 48k); this takes seconds. For the bulk of a benchmark only: the
    objects a benchmark watches for go through the API."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    url = f"{cp.etcd_url}/v3/kv/txn"

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    def put(batch: range, addresses: bool) -> None:
        ops = [{"requestPut": {"key": b64(key.encode()), "value": b64(json.dumps(obj).encode())}}
               for i in batch for key, obj in stored(i, endpoints, now)
               if key.startswith("/registry/ipaddresses/") == addresses]  # fmt: skip
        req = urllib.request.Request(url, json.dumps({"success": ops}).encode(), {"Content-Type": "application/json"})  # noqa: S310
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310  (our etcd, http)
            answer = json.load(resp)
        if not answer.get("succeeded"):
            raise RuntimeError(f"etcd txn failed: {answer}")

    batches = [range(a, min(stop, a + 60)) for a in range(start, stop, 60)]
    with ThreadPoolExecutor(threads) as pool:  # the IPAddresses first, or the apiserver's repair
        list(pool.map(lambda b: put(b, True), batches))  # loop "repairs" the Services it sees first
        list(pool.map(lambda b: put(b, False), batches))


def warm_up(api: kube.Client) -> None:
    """List everything once, as the proxy will. Right after the bulk is written into etcd, the
    apiserver's first list of it is slower (measured at 50k, both lists one after the other:
    11.2 s, then 7.2-7.6 s every time after); the apiserver of a live cluster holds its objects
    long before a proxy starts."""
    for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
        for _ in api.pages(path):
            pass
