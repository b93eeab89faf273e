"""Our one client of the Kubernetes API (kopf's watches aside): plain JSON over ``http.client``,
and protobuf for the Services and EndpointSlices (lists and watches: ``wire``).

Every call of ours goes through a ``Client``: the first lists of ``nftproxy run`` (started at
process start, ``early``), the status writer, the kube-proxy watch's Events, the periodic lists,
and the CLI (``verify``, ``explain``, ``selftest``). Its credentials come from ``credentials``,
which also feeds kopf's login. An error status is an ``ApiError`` (``.status``, ``.not_found``);
``read`` is the one place a 404 becomes None.

The standard library, not the Kubernetes client: importing that client costs ~0.15 s (its
generated API classes ~1 s more), more than a 1k-Service first sync; and we need only a few
paths, read and written as JSON. Nothing here imports kopf, aiohttp or the Kubernetes client
(import-linter's "the first sync" contract).
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import queue
import select
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from nftproxy.model.parse import HEADLESS_LABEL, PROXY_NAME_LABEL
from nftproxy.operator.credentials import Credentials, load

TIMEOUT = 30.0  # seconds, per request
IDLE = 8  # keep-alive connections kept per client
GROUP, VERSION, PLURAL = "nftproxy.io", "v1alpha1", "proxystatuses"
SERVICES = "/api/v1/services"
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"
CIDRS = "/apis/networking.k8s.io/v1/servicecidrs"
PROTOBUF = "application/vnd.kubernetes.protobuf"  # Services and EndpointSlices, as kube-proxy asks
WATCH = PROTOBUF + ";stream=watch"  # a watch's frames (wire.frames)


def _wire() -> Any:
    """``wire`` (protobuf: ~30 ms to import), imported where first used: in the thread of a first
    list, once its answer is in, so the import overlaps the apiserver's work, not the start."""
    from nftproxy.operator import wire  # noqa: PLC0415

    return wire


# Told of each request's outcome: (method, status code or "<error>" when no answer came, the
# apiserver's host[:port] as the URL names it, seconds from the first byte sent to the last read);
# `nftproxy run` counts them as client-go's rest_client_* metrics (operator/metrics.py).
RequestObserver = Callable[[str, str, str, float | None], None]


class ApiError(Exception):
    """The apiserver answered with an error status; ``message`` is its Status's message."""

    def __init__(self, status: int, reason: str, body: str, message: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        found = message
        try:
            found = found or (json.loads(body).get("message") if body else None)
        except (ValueError, AttributeError):
            found = None
        self.message = str(found) if found else (body[:200] or reason)
        super().__init__(f"({status}) {reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        """410 Gone: a watch's or a list's resourceVersion (or continue token) is too old."""
        return self.status == 410


class Client:
    """One apiserver: requests on a small pool of keep-alive connections (thread-safe: each
    request takes a connection of its own from the pool)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        url = urlsplit(credentials.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"apiserver URL {credentials.server!r}")
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.base = url.path.rstrip("/")
        self.netloc = url.netloc.rpartition("@")[2]  # client-go's `host` label: the URL's host[:port]
        self.on_request: RequestObserver | None = None
        self.context = credentials.ssl_context() if url.scheme == "https" else None
        self.proxy = urlsplit(credentials.proxy) if credentials.proxy else None
        if self.proxy is not None and (self.proxy.scheme != "http" or not self.proxy.hostname):
            raise ValueError(f"proxy {credentials.proxy!r}: only http:// proxies are supported")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # -- connections

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self.host, self.port
        if self.proxy is not None:  # a CONNECT tunnel through it
            host, port = self.proxy.hostname or "", self.proxy.port or 80
        if self.scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
        else:
            sni = self.credentials.tls_server_name or self.host
            conn = _HTTPS(host, port, self.context, sni)
        if self.proxy is not None:
            headers = {}
            if self.proxy.username is not None:
                user = f"{unquote(self.proxy.username)}:{unquote(self.proxy.password or '')}"
                headers["Proxy-Authorization"] = "Basic " + base64.b64encode(user.encode()).decode()
            conn.set_tunnel(self.host, self.port, headers)
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        """(a connection, whether it was used before)."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
                    return conn, True
                conn.close()  # closed by the server meanwhile (readable: EOF)
        return self._connect(), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float = TIMEOUT,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """One call, its JSON answer decoded (None when empty); ApiError on an error status.
        A body is sent as JSON (PATCH: a JSON merge patch). ``decode``: the answer is asked for
        in protobuf (``wire``), and ``decode`` reads its bytes."""
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        # gzip, as client-go asks: the apiserver compresses answers over 128 KB (the lists), ~10x less
        headers = {"Accept": _accept(decode is not None), "Accept-Encoding": "gzip", "User-Agent": "nftproxy"}
        if auth := self.credentials.authorization():
            headers["Authorization"] = auth
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        start = time.monotonic()
        try:
            resp, raw = self._send(method, url, data, headers, timeout)
        except Exception:
            self._observe(method, "<error>", start)
            raise
        self._observe(method, str(resp.status), start)
        if raw and resp.getheader("Content-Encoding", "").lower() == "gzip":
            raw = gzip.decompress(raw)
        if not 200 <= resp.status < 300:
            raise _error(resp, raw)
        if decode is not None and resp.getheader("Content-Type", "").startswith(PROTOBUF):
            return decode(raw)
        return json.loads(raw) if raw else None

    def _observe(self, method: str, code: str, start: float) -> None:
        if self.on_request is not None:
            self.on_request(method, code, self.netloc, time.monotonic() - start)

    def _send(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[http.client.HTTPResponse, bytes]:
        """The request on a pooled connection: the response (its body read) and that body."""
        while True:
            conn, reused = self._take()
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                if reused:  # the server closed the idle connection as we sent: once more, on a new one
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            break
        if resp.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return resp, raw

    def watch(self, path: str, query: dict[str, Any], timeout: float, protobuf: bool = False) -> Iterator[Any]:
        """A watch's events, one decoded JSON object per line, until the apiserver ends it (its
        ``timeoutSeconds``) or ``timeout`` passes without a byte; on a connection of its own.
        ``protobuf``: the watch in protobuf, its frames (``wire.frames``: each a WatchEvent's
        bytes) yielded as they are read."""
        url = self.base + path + f"?{urlencode({**query, 'watch': 'true'})}"
        headers = {"Accept": WATCH if protobuf else "application/json", "User-Agent": "nftproxy"}
        if auth := self.credentials.authorization():
            headers["Authorization"] = auth
        conn = self._connect()
        conn.timeout = timeout
        start = time.monotonic()
        try:
            try:
                conn.request("GET", url, headers=headers)
                resp = conn.getresponse()
            except Exception:
                self._observe("GET", "<error>", start)
                raise
            self._observe("GET", str(resp.status), start)  # until the answer's headers
            if not 200 <= resp.status < 300:
                raise _error(resp, resp.read())
            if protobuf:
                if not resp.getheader("Content-Type", "").startswith(PROTOBUF):
                    raise _wire().WireError(f"the watch answered {resp.getheader('Content-Type')!r}, not protobuf")
                yield from _wire().frames(resp)
                return
            for line in resp:
                if line.strip():
                    yield dict(json.loads(line))
        finally:
            conn.close()

    def read(self, path: str) -> dict[str, Any] | None:
        """One object; None when it does not exist (404)."""
        try:
            return dict(self.request("GET", path))
        except ApiError as e:
            if e.not_found:
                return None
            raise

    def pages(
        self,
        path: str,
        limit: int = 500,
        on_version: Callable[[str], None] | None = None,
        query: dict[str, Any] | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Iterator[list[dict[str, Any]]]:
        """A consistent list, page by page: the caller parses each page and lets it go, so the raw
        objects of the whole list (~10 KB each decoded) are never all in memory at once.
        ``on_version`` gets the list's resourceVersion (one snapshot for every page): a watch
        started there sees every change made after the list, and nothing before. ``decode``:
        in protobuf, each page read by it (``wire.Kind.list_page``: a page shaped as JSON's)."""
        return paged(lambda q: self.request("GET", path, {**(query or {}), **q}, decode=decode), limit, on_version)


def _accept(protobuf: bool) -> str:
    """protobuf, else JSON (for a resource the apiserver cannot send in protobuf: a custom one)."""
    return f"{PROTOBUF}, application/json" if protobuf else "application/json"


def _error(resp: http.client.HTTPResponse, raw: bytes) -> ApiError:
    """An error answer (a metav1.Status, in JSON or protobuf) as an ApiError."""
    message = _wire().status_message(raw) if resp.getheader("Content-Type", "").startswith(PROTOBUF) else None
    return ApiError(resp.status, resp.reason, raw.decode(errors="replace"), message)


class _HTTPS(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked for ``server_hostname`` (the kubeconfig's
    tls-server-name, also sent as SNI, else the apiserver's host), through a tunnel if set."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, server_hostname: str) -> None:
        super().__init__(host, port, timeout=TIMEOUT, context=context)
        self.tls_context = context or ssl.create_default_context()
        self.server_hostname = server_hostname

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # and the CONNECT tunnel, if any
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.server_hostname)


def connect(kubeconfig: str | None) -> Client:
    """A client for ``kubeconfig`` (None: the in-cluster service account)."""
    return Client(load(kubeconfig))


def paged(
    get: Callable[[dict[str, Any]], Any], limit: int, on_version: Callable[[str], None] | None
) -> Iterator[list[dict[str, Any]]]:
    """The pages of one list, GET(query) each (``limit``/``continue``): one snapshot, whose
    resourceVersion (from the first page) goes to ``on_version``."""
    token = None
    while True:
        query: dict[str, Any] = {"limit": limit}
        if token:
            query["continue"] = token
        page = get(query)
        meta = page.get("metadata") or {}
        if on_version is not None and not token and meta.get("resourceVersion"):
            on_version(str(meta["resourceVersion"]))
        yield page.get("items") or []
        token = meta.get("continue")
        if not token:
            return


class Prefetch:
    """A list fetched (and JSON-decoded) by a thread from the start of the process, while the
    rest of the operator imports and starts: the apiserver's work for the initial list overlaps
    ours. At most ``depth`` pages wait decoded (memory stays bounded)."""

    def __init__(self, pages: Callable[[Callable[[str], None]], Iterator[list[dict[str, Any]]]], depth: int = 4):
        self.version: str | None = None
        self._queue: queue.Queue[list[dict[str, Any]] | BaseException | None] = queue.Queue(depth)
        threading.Thread(target=self._run, args=(pages,), daemon=True, name="prefetch").start()

    def _set_version(self, version: str) -> None:
        self.version = version

    def _run(self, pages: Callable[[Callable[[str], None]], Iterator[list[dict[str, Any]]]]) -> None:
        try:
            for page in pages(self._set_version):
                self._queue.put(page)
            self._queue.put(None)
        except BaseException as e:  # handed to the reader, which retries with a list of its own
            self._queue.put(e)

    def pages(self) -> Iterator[list[dict[str, Any]]]:
        while (item := self._queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item


# --------------------------------------------------------------------------- what we read


Query = dict[str, str]


def service_options(proxy_name: str | None) -> Query:
    """What kube-proxy's Service informer asks for (cmd/kube-proxy/app/server.go, v1.37.2): no
    service-proxy-name label (with --service-proxy-name: that name), no headless Service."""
    proxied = f"{PROXY_NAME_LABEL}={proxy_name}" if proxy_name else f"!{PROXY_NAME_LABEL}"
    return {"labelSelector": proxied, "fieldSelector": "spec.clusterIP!=None"}


# kube-proxy's EndpointSlice informer's (v1.37.2): no headless label (not filtered by proxy name:
# a slice of a Service we do not serve is held, and unused)
SLICE_OPTIONS: Query = {"labelSelector": f"!{HEADLESS_LABEL}"}


def _service_page(raw: bytes) -> Any:
    return _wire().SERVICES.list_page(raw)


def _slice_page(raw: bytes) -> Any:
    return _wire().SLICES.list_page(raw)


def service_pages(
    api: Client, on_version: Callable[[str], None] | None = None, options: Query | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Services, in protobuf, each read into the lean dict the parser takes (``wire``);
    ``options``: the list's selectors (``service_options``: kube-proxy's)."""
    return api.pages(SERVICES, on_version=on_version, query=options, decode=_service_page)


def endpoint_slice_pages(
    api: Client, on_version: Callable[[str], None] | None = None, options: Query | None = None
) -> Iterator[list[dict[str, Any]]]:
    """EndpointSlices, as ``service_pages`` (``SLICE_OPTIONS``: kube-proxy's)."""
    return api.pages(SLICES, on_version=on_version, query=options, decode=_slice_page)


def service_cidrs(api: Client) -> list[dict[str, Any]]:
    """Every networking.k8s.io/v1 ServiceCIDR ([] where the API has none: before Kubernetes 1.33)."""
    try:
        return [o for page in api.pages(CIDRS) for o in page]
    except ApiError as e:
        if e.not_found:
            return []
        raise


def server_version(api: Client) -> dict[str, Any]:
    """The apiserver's ``/version`` (every authenticated client may read it)."""
    return dict(api.request("GET", "/version"))


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def read_node(api: Client, name: str) -> dict[str, Any] | None:
    return api.read(node_path(name))


def daemonsets_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets"
    return f"{path}/{quote(name)}" if name is not None else path


def proxy_status_path(node: str | None = None) -> str:
    path = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    return f"{path}/{quote(node)}" if node is not None else path


# --------------------------------------------------------------------------- what we write


def write_proxy_status(
    api: Client, node: str, node_uid: str | None, status: dict[str, Any], exists: bool = False
) -> None:
    """Create the node's ProxyStatus if needed (owned by the Node), then patch its status.
    ``exists``: it was written before, with this owner: one request, the patch (a ProxyStatus
    deleted since is created again: the patch's 404)."""
    if exists:
        try:
            api.request("PATCH", proxy_status_path(node) + "/status", body={"status": status})
            return
        except ApiError as e:
            if not e.not_found:
                raise
    owner = (
        [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "blockOwnerDeletion": False}]
        if node_uid
        else []
    )
    current = api.read(proxy_status_path(node))
    if current is None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProxyStatus",
            "metadata": {"name": node, "ownerReferences": owner},
            "spec": {"nodeName": node},
        }
        current = api.request("POST", proxy_status_path(), body=body)
    if owner and not (current or {}).get("metadata", {}).get("ownerReferences"):
        api.request("PATCH", proxy_status_path(node), body={"metadata": {"ownerReferences": owner}})
    api.request("PATCH", proxy_status_path(node) + "/status", body={"status": status})


def post_event(
    api: Client,
    node: str,
    kind: str,
    namespace: str,
    name: str,
    reason: str,
    message: str,
    event_type: str = "Warning",
) -> None:
    """An Event on an object (seen with `kubectl describe`): a Service or EndpointSlice left
    out, or (``kind`` "Node" or "ServiceCIDR", no namespace) a cluster-scoped one, e.g. this node
    with kube-proxy's rules found on it (Warning), or removed from it (Normal)."""
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
        "type": event_type,
        "source": {"component": "nftproxy", "host": node},
        "reportingComponent": "nftproxy",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    api.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", body=body)
