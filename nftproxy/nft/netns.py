"""Enter a named network namespace (``ip netns add NAME``) from the current thread."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000


def enter(name: str) -> None:
    """Move the calling thread (only) into /run/netns/NAME."""
    path = f"/run/netns/{name}"
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def call_in(name: str | None, fn: Callable[[], T], what: str = "netns") -> T:
    """``fn()`` run in network namespace NAME, by a throwaway thread that entered it (what it
    makes there, e.g. a socket, keeps that namespace; /proc/sys/net follows the thread's); its
    result, or its exception raised here. Without a name, ``fn()`` here."""
    if not name:
        return fn()
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            enter(name)
            result.append(fn())
        except BaseException as e:
            error.append(e)

    t = threading.Thread(target=run, name=what)
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


class Worker:
    """One long-lived thread that enters network namespace NAME (None: stays here) before its
    first call and runs calls one at a time, in submission order: what it opens (sockets, an
    nftables context) and the children it forks live in that namespace, and the rest of the
    process (API client, metrics) stays where it is."""

    def __init__(self, name: str | None, thread_name: str) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._entered = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(self._run, fn)

    def call(self, fn: Callable[[], T]) -> T:
        return self.submit(fn).result()

    def _run(self, fn: Callable[[], T]) -> T:
        if not self._entered:
            if self.name:
                enter(self.name)
            self._entered = True
        return fn()

    def close(self, last: Callable[[], object] | None = None) -> None:
        """Run ``last`` in the thread (e.g. close what it opened there), then end it."""
        if last is not None:
            with suppress(RuntimeError):  # already shut down
                self._pool.submit(last)
        self._pool.shutdown(wait=True)
