"""--bind-address-hard-fail, as kube-proxy's: without it a health or metrics address that cannot be
bound is logged and tried again (every 5 s) while the proxy runs; with it, the start fails."""

from __future__ import annotations

import argparse
import asyncio
import socket
import urllib.request
from typing import Any

import pytest

from nftproxy.cli import main, parse_args
from nftproxy.cli.flags import settings_from_args
from nftproxy.operator import health
from nftproxy.operator import main as operator_main
from nftproxy.operator.metrics import Metrics
from nftproxy.operator.sockets import ListenError


def taken_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s, s.getsockname()[1]


def settings(port: int, *flags: str) -> Any:
    args = parse_args(["run", "--node-name", "n1", "--metrics-bind-address", f"127.0.0.1:{port}", *flags])
    return settings_from_args(args)


def test_with_hard_fail_a_taken_port_fails_the_start() -> None:
    holder, port = taken_port()
    with holder, pytest.raises(ListenError, match=f"the metrics server cannot listen on 127.0.0.1:{port}"):
        operator_main._listen("metrics", ("127.0.0.1", port), settings(port, "--bind-address-hard-fail"))


def test_without_hard_fail_a_taken_port_is_logged_then_served_once_free(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_main, "RETRY_LISTEN", 0.05)
    holder, port = taken_port()
    s = settings(port)
    assert operator_main._listen("metrics", s.metrics, s) is None
    assert f"the metrics server cannot listen on 127.0.0.1:{port}" in caplog.text

    async def go() -> str:
        runners: list[Any] = []
        task = asyncio.create_task(
            operator_main._serve_later("metrics", s.metrics, health.metrics_app(Metrics()), s, runners)
        )
        await asyncio.sleep(0.2)
        assert not task.done() and runners == []  # still taken: still trying
        holder.close()
        await asyncio.wait_for(task, 5)
        loop = asyncio.get_running_loop()
        body: str = await loop.run_in_executor(
            None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/proxyMode", timeout=5).read().decode()
        )
        for r in runners:
            await r.cleanup()
        return body

    assert asyncio.run(go()) == "nftables"


def test_the_cli_says_why_in_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """What `run` meets with --bind-address-hard-fail (above) ends as one line and exit 1."""
    from nftproxy import cli  # noqa: PLC0415

    def fail(_args: Any) -> int:
        raise ListenError("the health server cannot listen on 0.0.0.0:10256: Address already in use")

    real = cli.build_parser

    def build() -> Any:
        p = real()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["run"].set_defaults(fn=fail)
        return p

    monkeypatch.setattr(cli, "build_parser", build)
    assert main(["run", "--node-name", "n1", "--bind-address-hard-fail"]) == 1
    assert capsys.readouterr().err == (
        "nftproxy: the health server cannot listen on 0.0.0.0:10256: Address already in use\n"
    )
