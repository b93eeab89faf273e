"""kopf's requests to the apiserver, counted as client-go's ``rest_client_*`` metrics (as our
own client's are, ``kube.Client.on_request``).

kopf (1.45) takes the aiohttp session it talks through from a login handler
(``kopf.AiohttpSession``); ``session`` builds it as kopf builds its own from a
``kopf.ConnectionInfo`` (kopf/_cogs/clients/auth.py: the same connector, TLS context, headers,
auth and proxy), with one addition: aiohttp's client tracing (``aiohttp.TraceConfig``), which
tells of each request's start, its response and its failure. A request's duration runs to its
response's headers (kopf reads the body after); a watch's (``watch=true``) is not observed, as
client-go does not observe it either.
"""

from __future__ import annotations

import time
import warnings
from types import SimpleNamespace
from urllib.parse import urlsplit

import aiohttp

from nftproxy.operator.kopf_import import kopf
from nftproxy.operator.kube import RequestObserver


def _is_watch(url: object) -> bool:
    query = getattr(url, "query", {})
    return str(query.get("watch", "")).lower() in ("true", "1")


def trace_config(observe: RequestObserver, host: str) -> aiohttp.TraceConfig:
    """Each request of a session: ``observe(method, code or "<error>", host, seconds or None)``."""
    trace = aiohttp.TraceConfig()

    async def start(_: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
        ctx.start = time.monotonic()

    def seconds(ctx: SimpleNamespace, url: object) -> float | None:
        return None if _is_watch(url) else time.monotonic() - ctx.start

    async def end(_: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
        observe(params.method, str(params.response.status), host, seconds(ctx, params.url))

    async def failed(
        _: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams
    ) -> None:
        observe(params.method, "<error>", host, seconds(ctx, params.url))

    trace.on_request_start.append(start)
    trace.on_request_end.append(end)
    trace.on_request_exception.append(failed)
    trace.freeze()
    return trace


def session(info: kopf.ConnectionInfo, observe: RequestObserver) -> kopf.AiohttpSession:
    """kopf's session for ``info`` (in the running event loop), its requests told to ``observe``."""
    with warnings.catch_warnings():  # as kopf: its own deprecation of basic auth, not aiohttp's
        warnings.filterwarnings("ignore", category=DeprecationWarning, module="kopf")
        auth = info.as_aiohttp_basic_auth()
    client = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        auth=auth,
        proxy=info.proxy_url,
        trust_env=info.trust_env,
        trace_configs=[trace_config(observe, urlsplit(info.server).netloc.rpartition("@")[2])],
    )
    return kopf.AiohttpSession(
        aiohttp_session=client,
        server=info.server,
        priority=info.priority,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
    )
