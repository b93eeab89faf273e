"""`nftproxy run`'s start (operator/boot.py, operator/early.py, operator/kube.py): the first lists with plain GETs,
the first sync committed before kopf is imported, and the watches at the lists' versions. The
same against a real apiserver, with a Service created between the list and the watch:
tests/k8s/test_boot.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from nftproxy.operator import boot, credentials, early, handlers, kube, main
from nftproxy.operator.kube import Prefetch
from testkit.k8s import objects as k
from tests.support import kubeconfigs
from tests.support.syncer import elements, make, settings, svc


def _done(value: Any) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(value)
    return f


def _failed(e: BaseException) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_exception(e)
    return f


def _versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def _lists(services: list[list[dict[str, Any]]], slices: list[list[dict[str, Any]]], **kw: Any) -> early.Lists:
    def pages(version: str, pages: list[list[dict[str, Any]]]) -> Any:
        def go(on_version: Any) -> Iterator[list[dict[str, Any]]]:
            on_version(version)
            yield from pages

        return go

    node = k.node("n1", {"InternalIP": "192.0.2.1"})
    node["metadata"]["uid"] = "node-uid"
    return early.Lists(
        api=cast(Any, SimpleNamespace()),
        services=kw.get("services_prefetch") or Prefetch(pages("41", services)),
        slices=Prefetch(pages("44", slices)),
        node=kw.get("node") or _done(node),
        cidrs=kw.get("cidrs") or _done([]),
        version=kw.get("version") or _done({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}),
    )


def test_the_first_sync_is_made_from_the_lists() -> None:
    async def go() -> None:
        syncer, fake = make()
        lists = _lists(
            [[svc("a", "10.96.0.1")], [svc("b", "10.96.0.2")]],
            [[k.endpoint_slice("a-1", "a", [k.endpoint("10.244.0.2")], [k.port(80, "http")])]],
            cidrs=_failed(OSError("refused")),  # best effort: the sync goes on without them
        )
        loaded = await boot.first_sync(syncer, lists)
        assert loaded is not None and loaded.synced
        assert loaded.versions == {"services": "41", "endpointslices": "44"} and loaded.node_uid == "node-uid"
        assert syncer.changes.loaded.is_set() and syncer.status.syncs == 1 and syncer.status.services == 2
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.2",)}
        assert syncer.changes.node is not None and syncer.changes.node.name == "n1"

    asyncio.run(go())


def test_a_failed_list_leaves_the_start_to_the_initial_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a list was fed when it failed: nothing is marked loaded, the operator's initial load
    lists again (with retries) and forgets what only the failed attempt saw (every object the
    API sends has a resourceVersion: what is held is known by it)."""

    def broken(on_version: Any) -> Iterator[list[dict[str, Any]]]:
        on_version("41")
        yield [_versioned(svc("a", "10.96.0.1"), "3"), _versioned(svc("b", "10.96.0.2"), "4")]
        raise kube.ApiError(500, "Internal Server Error", "etcd leader changed")

    monkeypatch.setattr(kube, "service_pages", lambda *_: iter([[_versioned(svc("a", "10.96.0.1"), "3")]]))
    monkeypatch.setattr(kube, "endpoint_slice_pages", lambda *_: iter([]))
    monkeypatch.setattr(kube, "read_node", lambda api, name: None)
    monkeypatch.setattr(kube, "service_cidrs", lambda api: [])
    monkeypatch.setattr(kube, "server_version", lambda api: {"major": "1", "minor": "37", "gitVersion": "v1.37.2"})

    async def go() -> None:
        syncer, fake = make()
        assert await boot.first_sync(syncer, _lists([], [], services_prefetch=Prefetch(broken))) is None
        assert not syncer.changes.loaded.is_set() and syncer.status.syncs == 0
        ctx = handlers.Context(syncer.settings, syncer, cast(Any, SimpleNamespace(node_uid=None)), api=None)
        await handlers.initial_load(ctx)
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}

    asyncio.run(go())


def test_a_failed_first_sync_is_retried_by_the_syncer() -> None:
    async def go() -> None:
        syncer, fake = make()
        fake.fail_next = "Error: the kernel said no"
        loaded = await boot.first_sync(syncer, _lists([[svc("a", "10.96.0.1")]], []))
        assert loaded is not None and not loaded.synced and syncer.changes.loaded.is_set()
        assert syncer.status.failures == 1 and syncer.schedule.full_due
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",)}

    asyncio.run(go())


def test_what_the_watch_brings_after_the_list_is_applied_once() -> None:
    """The watch starts at the list's version: an object the list had comes again only if it
    changed (a new resourceVersion); the same version is skipped, not parsed or synced again."""

    async def go() -> None:
        syncer, fake = make()
        listed = [[_versioned(svc("a", "10.96.0.1"), "5")]]
        assert await boot.first_sync(syncer, _lists(listed, [])) is not None
        syncer.changes.service_changed("default/a", _versioned(svc("a", "10.96.0.1"), "5"))
        assert not syncer.changes.pending
        syncer.changes.service_changed("default/b", _versioned(svc("b", "10.96.0.2"), "42"))  # created after the list
        await syncer.sync_once()
        assert elements(fake, "cluster-ips") == {("10.96.0.1",), ("10.96.0.2",)}

    asyncio.run(go())


def test_the_operator_starts_kopf_after_the_first_sync_at_the_lists_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf  # noqa: PLC0415

    from nftproxy.operator.kubeproxy_watch import KubeProxyWatch  # noqa: PLC0415
    from nftproxy.operator.status import StatusWriter  # noqa: PLC0415
    from nftproxy.operator.syncer import Syncer  # noqa: PLC0415

    seen: dict[str, Any] = {}

    async def operator(**kwargs: Any) -> None:
        ctx: handlers.Context = kwargs["memo"].nftproxy
        seen.update(versions=dict(ctx.list_versions), syncs=ctx.syncer.status.syncs, uid=ctx.writer.node_uid)
        metrics = ctx.syncer.metrics
        seen.update(
            in_sync=metrics.registry.get_sample_value("nftproxy_in_sync"),  # read from the syncer at the scrape
            counted=ctx.api.on_request == metrics.api_request == lists.api.on_request,  # rest_client_*
        )

    async def no_watch(*_: Any) -> None:
        return None

    monkeypatch.setattr(kopf, "operator", operator)
    monkeypatch.setattr(KubeProxyWatch, "run", no_watch)
    monkeypatch.setattr(StatusWriter, "run", no_watch)
    monkeypatch.setattr(Syncer, "run", no_watch)
    _, fake = make()
    lists = _lists([[svc("a", "10.96.0.1")]], [])
    asyncio.run(main._main(settings(), cast(Any, fake), api=SimpleNamespace(), prefetched={}, lists=lists))
    assert seen == {
        "versions": {"services": "41", "endpointslices": "44"},
        "syncs": 1,
        "uid": "node-uid",
        "in_sync": 1.0,
        "counted": True,
    }


def test_nothing_of_kopf_aiohttp_or_the_kubernetes_client_is_imported_for_the_first_sync() -> None:
    code = (
        "import sys, nftproxy.cli, nftproxy.operator.main, nftproxy.operator.boot;"
        "print(sorted({'kopf', 'kubernetes', 'aiohttp'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the first lists through our client (operator/kube.py) -------------------------------------


class _Api(BaseHTTPRequestHandler):
    """Two pages of Services, then a 404 for any other path."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        self.server.seen.append((url.path, q, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        if url.path != "/api/v1/services":
            self.send_response(404)
            self.end_headers()
            return
        first = "continue" not in q
        body = {
            "metadata": {"resourceVersion": "77", **({"continue": "next"} if first else {})},
            "items": [svc("a", "10.96.0.1")] if first else [svc("b", "10.96.0.2")],
        }
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_: Any) -> None:
        return None


def test_pages_keep_the_first_pages_version_and_follow_continue() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = kube.Client(credentials.Credentials(f"http://127.0.0.1:{server.server_port}", token="t"))  # noqa: S106  (a test's token)
        versions: list[str] = []
        pages = list(r.pages("/api/v1/services", limit=1, on_version=versions.append))
        assert [[o["metadata"]["name"] for o in p] for p in pages] == [["a"], ["b"]]
        assert versions == ["77"]
        seen = server.seen  # type: ignore[attr-defined]
        assert [(q.get("limit"), q.get("continue"), auth) for _, q, auth in seen] == [
            (["1"], None, "Bearer t"),
            (["1"], ["next"], "Bearer t"),
        ]
        assert kube.read_node(r, "n1") is None  # 404
        assert kube.service_cidrs(r) == []  # 404: an API without ServiceCIDRs
    finally:
        server.shutdown()


def test_python_m_nftproxy_starts_the_lists_before_the_imports_for_the_same_settings_only(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubeconfig = kubeconfigs.write(
            tmp_path / "kubeconfig", {"server": f"http://127.0.0.1:{server.server_port}"}, {"token": "t"}
        )
        early.start(["run", "--kubeconfig", kubeconfig, "--node-name=n1", "--netns", "x"])
        assert early.take(kubeconfig, "n2") is None  # argparse read another node: dropped
        early.start(["run", "--kubeconfig", kubeconfig, "--node-name", "n1"])
        lists = early.take(kubeconfig, "n1")
        assert lists is not None and early.take(kubeconfig, "n1") is None  # taken once
        assert [o["metadata"]["name"] for p in lists.services.pages() for o in p] == ["a", "b"]
        assert lists.node.result() is None  # 404 from this server
        config = tmp_path / "config.conf"  # kube-proxy's file: its kubeconfig and node name, unless flags say
        config.write_text(f"clientConnection:\n  kubeconfig: {kubeconfig}\nhostnameOverride: ' N3 '\n")
        early.start(["run", "--config", str(config)])
        lists = early.take(kubeconfig, "n3")
        assert lists is not None and [o["metadata"]["name"] for p in lists.services.pages() for o in p] == ["a", "b"]
        early.start(["run", "--config", str(config), "--node-name", "n4"])
        assert early.take(kubeconfig, "n4") is not None
        early.start(["render", "-f", "x"])  # other commands: nothing
        early.start(["run", "--kubeconfig", str(tmp_path / "missing"), "--node-name", "n1"])  # never raises
        assert early.take(str(tmp_path / "missing"), "n1") is None
    finally:
        server.shutdown()


def test_sigterm_during_the_first_sync_waits_for_it_then_stops_without_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    import kopf  # noqa: PLC0415

    called: list[str] = []

    async def operator(**_: Any) -> None:
        called.append("kopf")

    first_sync = boot.first_sync

    async def signalled(syncer: Any, lists: early.Lists) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # held: the first sync goes on
        await asyncio.sleep(0.01)
        return await first_sync(syncer, lists)

    monkeypatch.setattr(kopf, "operator", operator)
    monkeypatch.setattr(boot, "first_sync", signalled)
    _, fake = make()
    lists = _lists([[svc("a", "10.96.0.1")]], [])
    asyncio.run(main._main(settings(), cast(Any, fake), api=SimpleNamespace(), prefetched={}, lists=lists))
    assert called == [] and elements(fake, "cluster-ips") == {("10.96.0.1",)}
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
