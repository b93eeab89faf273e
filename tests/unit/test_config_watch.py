"""--config's file watched as kube-proxy watches its own: a change of its content stops the proxy
(to start again with it); the same content written again, or nothing, does not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nftproxy.operator import config_watch


def test_a_changed_file_stops_the_proxy_and_the_same_content_does_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.conf"
    path.write_text("mode: nftables\n")
    stopped: list[int] = []

    async def go() -> None:
        task = asyncio.create_task(config_watch.watch(str(path), lambda: stopped.append(1), period=0.02))
        await asyncio.sleep(0.1)
        path.write_text("mode: nftables\n")  # rewritten, same content (a ConfigMap resync)
        await asyncio.sleep(0.1)
        assert not task.done() and stopped == []
        path.write_text("mode: nftables\nclusterCIDR: 10.0.0.0/8\n")
        await asyncio.wait_for(task, 2)

    asyncio.run(go())
    assert stopped == [1]
    assert f"the configuration file {path} changed" in caplog.text


def test_a_file_gone_counts_as_changed(tmp_path: Path) -> None:
    path = tmp_path / "config.conf"
    path.write_text("x")
    stopped: list[int] = []

    async def go() -> None:
        task = asyncio.create_task(config_watch.watch(str(path), lambda: stopped.append(1), period=0.02))
        await asyncio.sleep(0.05)
        path.unlink()
        await asyncio.wait_for(task, 2)

    asyncio.run(go())
    assert stopped == [1]
