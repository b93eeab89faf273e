"""Enter a named network namespace (``ip netns add NAME``) from the current thread."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
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
