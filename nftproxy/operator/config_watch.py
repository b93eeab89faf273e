"""``--config``'s file watched, as kube-proxy watches its own: when its content changes (a
ConfigMap update reaches the mounted file), the proxy stops so that it starts again with the new
configuration (kube-proxy exits with "content of the proxy server's configuration file was
updated"; its pod, as nftproxy's, is restarted by the kubelet). The nftables rules stay in place
meanwhile, as at any stop, and the next start adopts them. Polled (the standard library has no
inotify): a read of one small file every few seconds."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
from collections.abc import Callable

log = logging.getLogger("nftproxy.config")

PERIOD = 2.0  # seconds between two reads of the file


def digest(path: str) -> str | None:
    """The file's content hash (None: unreadable, e.g. gone)."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def stop_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the usual stop: kopf ends, the rules stay


async def watch(path: str, on_change: Callable[[], None] = stop_process, period: float = PERIOD) -> None:
    """Return after calling ``on_change`` once the content of ``path`` differs from now."""
    first = digest(path)
    while True:
        await asyncio.sleep(period)
        if digest(path) != first:
            log.warning("the configuration file %s changed: stopping, to start again with it", path)
            on_change()
            return
