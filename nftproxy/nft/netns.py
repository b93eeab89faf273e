"""Enter a named network namespace (``ip netns add NAME``) from the current thread."""

from __future__ import annotations

import ctypes
import os

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
