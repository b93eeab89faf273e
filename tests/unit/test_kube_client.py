"""Our one client of the API (operator/kube.py) and its one credential loader
(operator/credentials.py), against a local HTTP server: errors, keep-alive, kubeconfigs (the
common ones read by us, exec plugins by the Kubernetes client's loader), proxies, kopf's login.
The same against a real kube-apiserver: tests/k8s/test_kube_client.py."""

from __future__ import annotations

import json
import select
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nftproxy.operator import credentials, kube
from tests.support import kubeconfigs


class _Api(BaseHTTPRequestHandler):
    """HTTP/1.1 (keep-alive). GET /ok: an object; GET /watch: two watch events; GET /missing: 404;
    POST /taken: 409; POST /invalid: 422 (Status bodies as the apiserver's); /bye: answers, then
    closes the connection without saying so. Every request's path, Authorization and connection are recorded."""

    protocol_version = "HTTP/1.1"

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._answer(code, {"kind": "Status", "status": "Failure", "reason": reason, "message": message, "code": code})

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(  # type: ignore[attr-defined]
            (self.command, self.path, self.headers.get("Authorization"), self.client_address[1], body)
        )
        path = self.path.partition("?")[0]
        if path == "/ok":
            self._answer(200, {"metadata": {"name": "ok"}})
        elif path == "/bye":
            self._answer(200, {"metadata": {"name": "bye"}})
            self.close_connection = True
        elif path == "/watch":  # a watch's answer: chunked, one JSON event per line, split anyhow
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n{"type":"DELETED","object":'
            for part in (events, b'{"metadata":{"name":"a"}}}\n'):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
        elif path == "/taken":
            self._status(409, "AlreadyExists", 'services "a" already exists')
        elif path == "/invalid":
            self._status(422, "Invalid", 'Service "a" is invalid: spec.ports: Required value')
        else:
            self._status(404, "NotFound", "not found")

    do_GET = do_POST = do_PATCH = _handle

    def log_message(self, *_: Any) -> None:
        return None


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    srv.daemon_threads = True
    srv.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_port}"


def test_an_error_status_is_one_error_type_and_a_404_reads_as_absent(server: ThreadingHTTPServer) -> None:
    api = kube.Client(credentials.Credentials(_url(server)))
    assert api.read("/ok") == {"metadata": {"name": "ok"}}
    assert api.read("/missing") is None
    with pytest.raises(kube.ApiError) as missing:
        api.request("GET", "/missing")
    assert missing.value.not_found and missing.value.status == 404
    with pytest.raises(kube.ApiError) as taken:
        api.request("POST", "/taken", body={"metadata": {"name": "a"}})
    assert (taken.value.status, taken.value.not_found) == (409, False)
    assert taken.value.message == 'services "a" already exists' and "409" in str(taken.value)
    with pytest.raises(kube.ApiError) as invalid:
        api.read("/invalid")  # only a 404 is absent: any other error is raised
    assert invalid.value.status == 422 and "spec.ports: Required value" in invalid.value.message


def test_a_watch_yields_each_event_of_the_stream_and_an_error_status_raises(server: ThreadingHTTPServer) -> None:
    api = kube.Client(credentials.Credentials(_url(server)))
    events = list(api.watch("/watch", {"fieldSelector": "metadata.name=a"}, timeout=5))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("DELETED", "a")]
    assert server.seen[-1][1] == "/watch?fieldSelector=metadata.name%3Da&watch=true"  # type: ignore[attr-defined]
    with pytest.raises(kube.ApiError) as missing:
        list(api.watch("/missing", {}, timeout=5))
    assert missing.value.not_found


def test_requests_share_a_kept_alive_connection_and_one_the_server_closed_is_replaced(
    server: ThreadingHTTPServer,
) -> None:
    api = kube.Client(credentials.Credentials(_url(server), token="t"))  # noqa: S106  (a test's token)
    api.read("/ok")
    api.read("/ok")
    api.read("/bye")  # the server closes this connection after answering
    api.read("/ok")
    api.request("PATCH", "/ok", body={"status": {"x": 1}})
    seen = server.seen  # type: ignore[attr-defined]
    ports = [port for *_, port, _ in seen]
    assert ports[0] == ports[1] == ports[2] != ports[3] == ports[4]
    assert {auth for _, _, auth, _, _ in seen} == {"Bearer t"}
    assert json.loads(seen[4][4]) == {"status": {"x": 1}}


def test_a_kubeconfig_with_a_token_file_basic_auth_or_no_tls_check(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("s3cret\n")
    c = credentials.load(
        kubeconfigs.write(tmp_path / "a", {"server": "http://127.0.0.1:8080/prefix/"}, {"tokenFile": "tok"}), {}
    )
    api = kube.Client(c)
    assert (api.scheme, api.host, api.port, api.base) == ("http", "127.0.0.1", 8080, "/prefix")
    assert c.authorization() == "Bearer s3cret" and c.renew is None  # read here, not by the Kubernetes client
    c = credentials.load(
        kubeconfigs.write(tmp_path / "b", {"server": "http://h"}, {"username": "a", "password": "b"}), {}
    )
    assert c.authorization() == "Basic YTpi" and kube.Client(c).port == 80
    c = credentials.load(
        kubeconfigs.write(tmp_path / "c", {"server": "https://h:6443", "insecure-skip-tls-verify": True}, {}), {}
    )
    assert not c.ssl_context().check_hostname and c.authorization() is None


def test_a_token_file_is_read_again_after_a_minute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As client-go: a rotated token (the in-cluster service account's) is picked up."""
    (tmp_path / "tok").write_text("one")
    c = credentials.load(kubeconfigs.write(tmp_path / "kc", {"server": "http://h"}, {"tokenFile": "tok"}), {})
    (tmp_path / "tok").write_text("two")
    assert c.authorization() == "Bearer one"
    monkeypatch.setattr(credentials, "TOKEN_FILE_PERIOD", 0.0)
    assert c.authorization() == "Bearer two"


def test_an_exec_plugin_kubeconfig_is_read_by_the_kubernetes_clients_loader(
    tmp_path: Path, server: ThreadingHTTPServer
) -> None:
    user = kubeconfigs.exec_plugin(tmp_path, "from-the-plugin")
    c = credentials.load(kubeconfigs.write(tmp_path / "kc", {"server": _url(server)}, user), {})
    assert c.renew is not None
    kube.Client(c).read("/ok")
    kube.Client(c).read("/ok")
    assert [auth for _, _, auth, _, _ in server.seen] == ["Bearer from-the-plugin"] * 2  # type: ignore[attr-defined]
    assert kubeconfigs.runs(tmp_path) == 1  # not expired: run once


def test_an_expired_exec_token_runs_the_plugin_again(tmp_path: Path, server: ThreadingHTTPServer) -> None:
    user = kubeconfigs.exec_plugin(tmp_path, "short-lived", expires="2020-01-01T00:00:00Z")
    c = credentials.load(kubeconfigs.write(tmp_path / "kc", {"server": _url(server)}, user), {})
    kube.Client(c).read("/ok")
    assert kubeconfigs.runs(tmp_path) == 2  # loaded, then expired at the request: run again


def test_several_kubeconfig_files_are_merged_by_the_kubernetes_clients_loader(tmp_path: Path) -> None:
    first = kubeconfigs.write(tmp_path / "a", {"server": "http://first"}, {"token": "t1"})
    c = credentials.load(f"{first}:{tmp_path / 'absent'}", {})
    assert (c.server, c.authorization()) == ("http://first", "Bearer t1")


def test_an_unusable_kubeconfig_or_none_outside_a_cluster_says_why(tmp_path: Path) -> None:
    with pytest.raises(credentials.ConfigError, match="kubeconfig"):
        credentials.load(str(tmp_path / "missing"), {})
    with pytest.raises(credentials.ConfigError, match="not in a cluster"):
        credentials.load(None, {})


def test_in_cluster_the_service_account_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setattr(credentials, "TOKEN_FILE", str(tmp_path / "token"))
    c = credentials.load(None, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
    assert (c.server, c.ca_file, c.authorization()) == ("https://[fd00::1]:443", credentials.CA_FILE, "Bearer sa-token")


def test_a_proxy_from_the_environment_applies_unless_no_proxy_says_otherwise(tmp_path: Path) -> None:
    kc = kubeconfigs.write(tmp_path / "kc", {"server": "http://api.example:8080"}, {"token": "t"})
    assert credentials.load(kc, {"HTTP_PROXY": "http://proxy:3128"}).proxy == "http://proxy:3128"
    assert credentials.load(kc, {"https_proxy": "http://proxy:3128"}).proxy is None  # another scheme
    assert credentials.load(kc, {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "example"}).proxy is None
    with pytest.raises(ValueError, match="only http:// proxies"):
        kube.Client(credentials.load(kc, {"HTTP_PROXY": "socks5://proxy:1080"}))


def test_kopf_logs_in_with_our_credentials(tmp_path: Path) -> None:
    from nftproxy.operator import handlers  # noqa: PLC0415

    login = handlers.connection_info
    info = login(credentials.Credentials("https://h:6443", ca_data=b"PEM", token="abc", proxy="http://p:3128"))  # noqa: S106  (a test's token)
    assert (info.server, info.ca_data, info.scheme, info.token, info.proxy_url) == (
        "https://h:6443",
        b"PEM",
        "Bearer",
        "abc",
        "http://p:3128",
    )
    user = kubeconfigs.exec_plugin(tmp_path, "from-the-plugin")
    info = login(credentials.load(kubeconfigs.write(tmp_path / "kc", {"server": "http://h"}, user), {}))
    assert (info.scheme, info.token) == ("Bearer", "from-the-plugin")
    info = login(credentials.Credentials("http://h", username="a", password="b"))  # noqa: S106  (a test's token)
    assert info.as_http_headers() == {"Authorization": "Basic YTpi"}


Observed = list[tuple[str, str, str, float | None]]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_request_of_our_client_is_told_with_client_gos_labels(server: ThreadingHTTPServer) -> None:
    """kube.Client.on_request: method, status code, the apiserver's host:port and the seconds,
    for an answer, an error status and no answer at all ("<error>", as client-go's)."""
    seen: Observed = []
    api = kube.Client(credentials.Credentials(_url(server)))
    api.on_request = lambda *a: seen.append(a)
    api.read("/ok")
    api.read("/missing")
    with pytest.raises(kube.ApiError):
        api.request("POST", "/taken", body={})
    host = f"127.0.0.1:{server.server_port}"
    assert [s[:3] for s in seen] == [("GET", "200", host), ("GET", "404", host), ("POST", "409", host)]
    assert all(s[3] is not None and 0 <= s[3] < 5 for s in seen)
    down = kube.Client(credentials.Credentials(f"http://127.0.0.1:{_closed_port()}"))
    down.on_request = lambda *a: seen.append(a)
    with pytest.raises(OSError):
        down.read("/ok")
    assert seen[-1][:3] == ("GET", "<error>", f"127.0.0.1:{down.port}")


def test_kopfs_session_tells_each_request_and_times_all_but_watches(server: ThreadingHTTPServer) -> None:
    """The session kopf gets from our login handler (operator/restclient.py): kopf's requests
    through it, against a real HTTP server, are told as our client's are; a watch is counted,
    not timed (as client-go)."""
    import asyncio  # noqa: PLC0415

    from nftproxy.operator import handlers, restclient  # noqa: PLC0415

    seen: Observed = []

    def observe(method: str, code: str, host: str, seconds: float | None) -> None:
        seen.append((method, code, host, seconds))

    async def run(url: str, paths: list[str]) -> None:
        info = handlers.connection_info(credentials.Credentials(url, token="t"))  # noqa: S106  (a test's token)
        login = restclient.session(info, observe)
        try:
            for path in paths:
                try:
                    async with login.aiohttp_session.get(url + path) as resp:
                        await resp.read()
                except OSError:
                    pass
        finally:
            await login.aiohttp_session.close()

    asyncio.run(run(_url(server), ["/ok", "/missing", "/ok?watch=true"]))
    host = f"127.0.0.1:{server.server_port}"
    assert [s[:3] for s in seen] == [("GET", "200", host), ("GET", "404", host), ("GET", "200", host)]
    assert seen[0][3] is not None and seen[1][3] is not None and seen[2][3] is None
    assert {auth for _, _, auth, _, _ in server.seen} == {"Bearer t"}  # type: ignore[attr-defined]
    port = _closed_port()
    asyncio.run(run(f"http://127.0.0.1:{port}", ["/ok"]))
    assert seen[-1][:3] == ("GET", "<error>", f"127.0.0.1:{port}")


class _ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP CONNECT proxy (as squid answers it): records each CONNECT target, then relays."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.targets: list[str] = []


class _Tunnel(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.request.recv(4096)
        target = head.split(b" ", 2)[1].decode()
        self.server.targets.append(target)  # type: ignore[attr-defined]
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        ends = [self.request, upstream]
        while True:
            for end in select.select(ends, [], [], 5)[0]:
                data = end.recv(65536)
                if not data:
                    upstream.close()
                    return
                (upstream if end is self.request else self.request).sendall(data)


def test_requests_go_through_the_environments_proxy(tmp_path: Path, server: ThreadingHTTPServer) -> None:
    proxy = _ConnectProxy()
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        kc = kubeconfigs.write(tmp_path / "kc", {"server": _url(server)}, {"token": "t"})
        env = {"HTTP_PROXY": f"http://127.0.0.1:{proxy.server_address[1]}"}
        api = kube.Client(credentials.load(kc, env))
        assert api.read("/ok") == {"metadata": {"name": "ok"}}
        assert api.read("/missing") is None
        assert proxy.targets == [f"127.0.0.1:{server.server_port}"]  # one tunnel, kept alive
        assert [auth for _, _, auth, _, _ in server.seen] == ["Bearer t", "Bearer t"]  # type: ignore[attr-defined]
    finally:
        proxy.shutdown()
        proxy.server_close()
