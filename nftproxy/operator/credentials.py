"""Where the apiserver is and how to authenticate: the one loader of every connection of ours
(``kube.Client``: the first lists, the status writer, the CLI) and of kopf's (its login handler,
``handlers.login``).

``load(None)`` is the in-cluster service account (its token file read again every minute, as
client-go does: kubelet rotates it). ``load(path)`` is a kubeconfig: its current context, read
here with the standard library and PyYAML when it uses only what this module reproduces (a
server, a CA, a client certificate, a token or token file, a username and password); anything
else (exec credential plugins such as EKS's and GKE's, auth providers, several files in
``KUBECONFIG``, a ``proxy-url``) is read by the Kubernetes client's own kubeconfig loader,
imported only then (~0.15 s: the reason the common case does not use it, see ``boot``), whose
result becomes the same ``Credentials``; an exec plugin's token is renewed through it when it
expires. Proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``) apply as the Kubernetes
client applies them.

Nothing here imports kopf, aiohttp or the Kubernetes client at import time (import-linter).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"  # noqa: S105  (a path)
CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
TOKEN_FILE_PERIOD = 60.0  # seconds between two reads of a token file (client-go: one minute)
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
# what this module reads of a kubeconfig's cluster and user itself (else: the Kubernetes client's loader)
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


class ConfigError(Exception):
    """No usable apiserver or credentials (the message says why)."""


class _ClientLoader(Exception):
    """This kubeconfig is for the Kubernetes client's loader."""


@dataclass
class Credentials:
    """One apiserver and how to reach it. PEM data or file paths; at most one of each."""

    server: str  # https://host:port[/path]
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None  # read again every TOKEN_FILE_PERIOD
    username: str | None = None
    password: str | None = None
    proxy: str | None = None  # http://[user:pass@]host:port
    # the Authorization header from the Kubernetes client's loader (an exec plugin run again when expired)
    renew: Callable[[], str | None] | None = None
    _token_read: float = field(default=0.0, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authorization(self) -> str | None:
        """The Authorization header's value now (None: client certificate, or anonymous)."""
        if self.renew is not None:
            return self.renew()
        if self.token_file and time.monotonic() - self._token_read >= TOKEN_FILE_PERIOD:
            with self._lock, open(self.token_file) as f:
                self.token = f.read().strip()
                self._token_read = time.monotonic()
        if self.token:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the Kubernetes client does it: the CA given (else the system's), the client
        certificate if any; hostnames checked unless insecure-skip-tls-verify."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_data is not None or self.ca_file:
            ctx.load_verify_locations(
                cafile=self.ca_file, cadata=self.ca_data.decode() if self.ca_data is not None else None
            )
        else:
            ctx.load_default_certs()
        cert = self.cert_data if self.cert_data is not None else self.cert_file
        key = self.key_data if self.key_data is not None else self.key_file
        if cert and key:
            with _files(cert, key) as (cert_file, key_file):
                ctx.load_cert_chain(cert_file, key_file)
        elif cert or key:
            raise ConfigError("a client certificate without its key, or the other way round")
        return ctx


def load(kubeconfig: str | None, environ: Mapping[str, str] | None = None) -> Credentials:
    """The credentials of ``kubeconfig`` (None: in-cluster). ConfigError when there are none."""
    env = os.environ if environ is None else environ
    if kubeconfig is None:
        creds = _in_cluster(env)
    else:
        try:
            creds = _from_kubeconfig(kubeconfig)
        except _ClientLoader:
            creds = _with_client_loader(kubeconfig)
    if creds.proxy is None:
        creds.proxy = _env_proxy(creds.server, env)
    return creds


# --------------------------------------------------------------------------- in-cluster


def _in_cluster(env: Mapping[str, str]) -> Credentials:
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("no kubeconfig given and not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset)")
    if ":" in host:
        host = f"[{host}]"
    creds = Credentials(f"https://{host}:{port}", ca_file=CA_FILE, token_file=TOKEN_FILE)
    try:
        token = creds.authorization()
    except OSError as e:
        raise ConfigError(f"in-cluster: {e}") from None
    if not token:
        raise ConfigError(f"in-cluster: the service account token {TOKEN_FILE} is empty")
    return creds


# --------------------------------------------------------------------------- kubeconfig


def _from_kubeconfig(path: str) -> Credentials:
    """The common kubeconfig, read here; _ClientLoader for the rest (or anything wrong: the
    Kubernetes client's loader then says what)."""
    if os.pathsep in path:
        raise _ClientLoader("several kubeconfig files")
    try:
        import yaml  # noqa: PLC0415  (already imported by the model's manifests)

        with open(path) as f:
            loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            doc = yaml.load(f, Loader=loader)  # noqa: S506  (a safe loader, as the client's safe_load)
        context = _named(doc, "contexts", doc["current-context"])
        cluster = _named(doc, "clusters", context["cluster"])
        user = _named(doc, "users", context["user"]) if context.get("user") else {}
    except Exception as e:
        raise _ClientLoader(str(e)) from None
    if (set(cluster) - CLUSTER_KEYS) | (set(user) - USER_KEYS):
        raise _ClientLoader("exec plugin, auth provider or proxy")
    base = os.path.dirname(os.path.abspath(path))
    server = str(cluster.get("server") or "").rstrip("/")
    if urlsplit(server).scheme not in ("http", "https"):
        raise _ClientLoader(f"server {server!r}")
    creds = Credentials(
        server,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        username=user.get("username"),
        password=user.get("password"),
    )
    if "token" in user:  # as the client: the token before the token file
        creds.token = str(user["token"] or "")
    elif user.get("tokenFile"):
        creds.token_file = os.path.join(base, user["tokenFile"])
    if server.startswith("https"):
        creds.ca_data, creds.ca_file = _pem(cluster, "certificate-authority", base)
        creds.cert_data, creds.cert_file = _pem(user, "client-certificate", base)
        creds.key_data, creds.key_file = _pem(user, "client-key", base)
    try:
        creds.authorization()  # a token file is readable
        if server.startswith("https"):
            creds.ssl_context()  # the CA and the client certificate load
    except Exception as e:
        raise _ClientLoader(str(e)) from None
    return creds


def _named(doc: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    for item in doc.get(kind) or []:
        if item.get("name") == name:
            return dict(item[kind[:-1]] or {})
    raise KeyError(f"{kind[:-1]} {name!r} not found")


def _pem(section: dict[str, Any], key: str, base: str) -> tuple[bytes | None, str | None]:
    """(PEM data, None) from ``KEY-data``, or (None, the file's path) from ``KEY``."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"]), None
    if section.get(key):
        return None, os.path.normpath(os.path.join(base, section[key]))
    return None, None


def _with_client_loader(path: str) -> Credentials:
    """The Kubernetes client's kubeconfig loader (exec plugins, auth providers, merged files,
    proxy-url), its result as Credentials."""
    try:
        from kubernetes.client import Configuration  # noqa: PLC0415  (~0.15 s: only for these)
        from kubernetes.config.kube_config import load_kube_config  # noqa: PLC0415

        cfg = Configuration()
        load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)  # type: ignore[no-untyped-call]
    except Exception as e:
        raise ConfigError(f"kubeconfig {path}: {e}") from None

    lock = threading.Lock()

    def renew() -> str | None:
        # an exec plugin's token: run again by the client's hook when expired (once, not per thread)
        with lock:
            header: str | None = cfg.get_api_key_with_prefix("BearerToken")
        return header or None

    return Credentials(
        str(cfg.host).rstrip("/"),
        ca_file=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        tls_server_name=getattr(cfg, "tls_server_name", None),
        cert_file=cfg.cert_file,
        key_file=cfg.key_file,
        proxy=cfg.proxy,
        renew=renew,
    )


# --------------------------------------------------------------------------- proxies


def _env_proxy(server: str, env: Mapping[str, str]) -> str | None:
    """The proxy the environment sets for ``server`` (lower case first, NO_PROXY honoured)."""
    if not any(env.get(v) for v in PROXY_VARIABLES):
        return None
    url = urlsplit(server)
    proxy = None
    for name in (f"{url.scheme}_proxy", "all_proxy"):
        proxy = env.get(name) or env.get(name.upper())
        if proxy:
            break
    if not proxy:
        return None
    from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]  # noqa: PLC0415

    no_proxy = env.get("no_proxy") or env.get("NO_PROXY") or ""
    host = url.netloc.rsplit("@", 1)[-1]
    return None if no_proxy and proxy_bypass_environment(host, {"no": no_proxy}) else proxy


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
