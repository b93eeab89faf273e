"""The first lists with the standard library alone: the kubeconfig (or the in-cluster service
account) read as the Kubernetes client reads it, and plain ``GET``s over ``http.client``.

``nftproxy run`` lists, compiles and commits its first ruleset before it imports kopf, aiohttp
or the Kubernetes client (~0.5 s of imports, more than a 1k-Service first sync costs): see
``boot``. Only what is needed for that: a consistent list page by page (its resourceVersion
kept for the watches), and one object by its path. A kubeconfig that needs more than this
module does (exec plugins, auth providers, a proxy) raises ``Unsupported``: the operator then
starts as before, with the Kubernetes client. Everything after the first sync uses that client.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105  (a path)
CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
# what this module reproduces of a kubeconfig's cluster and user (anything else: Unsupported)
CLUSTER_KEYS = {
    "server",
    "certificate-authority",
    "certificate-authority-data",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "extensions",
}
USER_KEYS = {
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "token",
    "tokenFile",
    "username",
    "password",
    "extensions",
}
TIMEOUT = 30.0  # seconds, per request (as kube.request)


class Unsupported(Exception):
    """This configuration needs the Kubernetes client (or is invalid: the client says why)."""


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"({status}) {reason}: {body[:200]}")
        self.status = status


@dataclass
class Rest:
    """Where the apiserver is and how to authenticate: enough for GETs."""

    scheme: str
    host: str
    port: int
    base: str = ""  # the server URL's path, if any
    context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def connection(self) -> http.client.HTTPConnection:
        if self.scheme == "http":
            return http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        return _HTTPS(self.host, self.port, self.context, self.server_hostname)

    def get(self, conn: http.client.HTTPConnection, path: str, query: dict[str, Any] | None = None) -> Any:
        """One GET on ``conn`` (kept alive), its JSON answer decoded; ApiError on an error status."""
        url = self.base + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "User-Agent": "nftproxy", **self.headers}
        try:
            conn.request("GET", url, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except BaseException:
            conn.close()
            raise
        if not 200 <= resp.status < 300:
            raise ApiError(resp.status, resp.reason, raw.decode(errors="replace"))
        return json.loads(raw) if raw else None

    def pages(
        self, path: str, limit: int = 500, on_version: Callable[[str], None] | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """A consistent list page by page, as ``kube.pages`` (same pages, same resourceVersion)."""
        conn = self.connection()
        try:
            yield from paged(lambda query: self.get(conn, path, query), limit, on_version)
        finally:
            conn.close()

    def read(self, path: str) -> dict[str, Any] | None:
        """One object (None: 404)."""
        conn = self.connection()
        try:
            return dict(self.get(conn, path))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        finally:
            conn.close()

    def service_cidrs(self) -> list[dict[str, Any]]:
        """As ``kube.service_cidrs``: [] where the API has none."""
        try:
            return [o for page in self.pages("/apis/networking.k8s.io/v1/servicecidrs") for o in page]
        except ApiError as e:
            if e.status == 404:
                return []
            raise

    def node(self, name: str) -> dict[str, Any] | None:
        return self.read(f"/api/v1/nodes/{quote(name)}")

    def server_version(self) -> dict[str, Any]:
        """The apiserver's ``/version`` (every authenticated client may read it)."""
        found = self.read("/version")
        if found is None:
            raise ApiError(404, "Not Found", "/version")
        return found


class _HTTPS(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked for ``server_hostname`` (the kubeconfig's
    tls-server-name, also sent as SNI) when given, else for the host connected to."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, server_hostname: str | None) -> None:
        super().__init__(host, port, timeout=TIMEOUT, context=context)
        self.tls_context = context or ssl.create_default_context()
        self.server_hostname = server_hostname or host

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.server_hostname)


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


def load(kubeconfig: str | None, environ: dict[str, str] | None = None) -> Rest:
    """The apiserver and credentials of ``kubeconfig`` (None: in-cluster), as the Kubernetes
    client (``kube.api_client``) would use them; Unsupported when it would do more, or when
    anything is wrong (the client then says what)."""
    env = dict(os.environ) if environ is None else environ
    try:
        return _load(kubeconfig, env)
    except Unsupported:
        raise
    except Exception as e:
        raise Unsupported(f"{type(e).__name__}: {e}") from None


def _load(kubeconfig: str | None, env: dict[str, str]) -> Rest:
    if any(env.get(v) for v in PROXY_VARIABLES):
        raise Unsupported("a proxy is set in the environment")
    if kubeconfig is None:
        return _in_cluster(env)
    if os.pathsep in kubeconfig:
        raise Unsupported("several kubeconfig files")
    import yaml  # noqa: PLC0415  (already imported by the model's manifests)

    with open(kubeconfig) as f:
        loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(f, Loader=loader)  # noqa: S506  (a safe loader, as the client's safe_load)
    return _from_kubeconfig(doc, os.path.dirname(os.path.abspath(kubeconfig)))


def _in_cluster(env: dict[str, str]) -> Rest:
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise Unsupported("no kubeconfig and not in a cluster")
    with open(TOKEN_FILE) as f:
        token = f.read()
    ctx = ssl.create_default_context(cafile=CA_FILE)
    if not token:
        raise Unsupported("in-cluster: empty token")
    return Rest("https", host, int(port), context=ctx, headers={"Authorization": f"Bearer {token}"})


def _named(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    for item in doc.get(kind) or []:
        if item.get("name") == name:
            return dict(item[kind[:-1]] or {})
    raise KeyError(f"{kind[:-1]} {name!r} not found")


def _from_kubeconfig(doc: dict[str, Any], base: str) -> Rest:
    context = _named(doc, "contexts", doc["current-context"])
    cluster = _named(doc, "clusters", context["cluster"])
    user = _named(doc, "users", context["user"]) if context.get("user") else {}
    if extra := (set(cluster) - CLUSTER_KEYS) | (set(user) - USER_KEYS):
        raise Unsupported(f"kubeconfig uses {', '.join(sorted(extra))}")
    url = urlsplit(str(cluster["server"]).rstrip("/"))
    if url.scheme not in ("http", "https") or not url.hostname:
        raise Unsupported(f"server {cluster['server']!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    headers: dict[str, str] = {}
    token = user.get("token") if "token" in user else _read(base, user.get("tokenFile"))
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif "username" in user and "password" in user:
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    rest = Rest(url.scheme, url.hostname, port, url.path, headers=headers)
    if url.scheme == "https":
        rest.context = _tls(cluster, user, base)
        rest.server_hostname = cluster.get("tls-server-name") or None
    return rest


def _read(base: str, path: str | None) -> str | None:
    if not path:
        return None
    with open(os.path.join(base, path)) as f:
        return f.read()


def _tls(cluster: dict[str, Any], user: dict[str, Any], base: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cluster.get("insecure-skip-tls-verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif "certificate-authority-data" in cluster:
        ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif "certificate-authority" in cluster:
        ctx.load_verify_locations(cafile=os.path.join(base, cluster["certificate-authority"]))
    else:
        raise Unsupported("no certificate authority (the client would use its own bundle)")
    cert, key = _pem(user, "client-certificate", base), _pem(user, "client-key", base)
    if cert and key:
        with _files(cert, key) as (cert_file, key_file):
            ctx.load_cert_chain(cert_file, key_file)
    elif cert or key:
        raise Unsupported("a client certificate without its key, or the other way round")
    return ctx


def _pem(user: dict[str, Any], key: str, base: str) -> bytes | str | None:
    """The PEM as bytes (from ``KEY-data``) or the file's path (``KEY``), as the client prefers."""
    if f"{key}-data" in user:
        return base64.b64decode(user[f"{key}-data"])
    if key in user:
        return os.path.normpath(os.path.join(base, user[key]))
    return None


class _files:
    """Paths for ``load_cert_chain``: a path as is, PEM bytes in a private temporary file that is
    removed as soon as it is loaded."""

    def __init__(self, *items: bytes | str) -> None:
        self.items = items
        self.made: list[str] = []

    def __enter__(self) -> tuple[str, ...]:
        out = []
        for item in self.items:
            if isinstance(item, str):
                out.append(item)
                continue
            fd, path = tempfile.mkstemp(prefix="nftproxy-")
            self.made.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(item)
            out.append(path)
        return tuple(out)

    def __exit__(self, *_: object) -> None:
        for path in self.made:
            os.unlink(path)


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
