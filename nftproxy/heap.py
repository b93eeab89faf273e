"""The process's heap, in one place: when the cyclic GC is off or told what is long-lived, and how
glibc's malloc is tuned and trimmed. Each is a context manager or function named for what it
protects; docs/performance.md names the bench that guards each and its figures.

- ``bulk_decode`` / ``bulk_compile``: ~10^6 objects allocated at once and no cycles among them (a
  list decoded and parsed, a full compile, a first load): the cyclic GC would only walk them again
  and again; what is
  alive afterwards is long-lived, and ``gc.freeze`` moves it out of the collector's reach
  (reference counting still frees it).
- ``settle``: after a full sync the caches hold ~10^6 long-lived objects: one collection, then
  freeze them, or each full collection walks them all (a pause of seconds at 10k Services).
- ``tune`` / ``trim``: glibc's malloc (below).

- One arena: the sync jobs run in an executor thread, and glibc gives each thread an arena of its
  own (a heap whose free top `malloc_trim` leaves in place); with one, what a thread frees is
  reused by any thread and trimmed. Threads allocate holding the GIL, so its lock costs nothing
  measurable (bench.churn, docs/performance.md).
- Fixed thresholds: by default glibc raises its mmap threshold to the size of each mmapped block
  freed (up to 32 MB, and the trim threshold to twice that), so once a big dict table is freed the
  next ones come from the heap and their holes stay resident; fixed, a block over 128 KiB is
  mmapped and goes back to the system when freed, and the heap's free top is trimmed over 128 KiB.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
from collections.abc import Iterator

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
THRESHOLD = 128 * 1024  # glibc's initial value for both: set, it stays put


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc by its soname; else whatever ``find_library`` finds (it runs ``ldconfig -p``: a
    process, ~3 ms, once, not at every start and trim)."""
    with contextlib.suppress(OSError):
        return ctypes.CDLL("libc.so.6")
    from ctypes import util  # noqa: PLC0415

    try:
        return ctypes.CDLL(util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def tune() -> bool:
    """Before any thread starts: one arena for every thread, and the thresholds fixed."""
    libc = _libc()
    with contextlib.suppress(AttributeError):  # not glibc
        return libc is not None and all(
            libc.mallopt(param, value)
            for param, value in ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, THRESHOLD), (M_TRIM_THRESHOLD, THRESHOLD))
        )
    return False


def trim() -> None:
    """Give the heap's free pages back to the system (after a bulk load or a walk of every element)."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.malloc_trim(0)


@contextlib.contextmanager
def _no_cyclic_gc(when: bool = True, freeze: bool = True) -> Iterator[None]:
    if not when or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        gc.enable()


def bulk_decode() -> contextlib.AbstractContextManager[None]:
    """Decoding and parsing whole lists (an initial list, ``-f`` files): no cyclic GC meanwhile,
    and the model it leaves is frozen out of the collector's reach."""
    return _no_cyclic_gc()


def bulk_compile(when: bool = True) -> contextlib.AbstractContextManager[None]:
    """A full compile or a first load (``when``: only when it is big): no cyclic GC meanwhile, and
    the compiled state it leaves is frozen."""
    return _no_cyclic_gc(when)


def settle() -> None:
    """After a full sync: collect once, freeze what is left (long-lived caches), trim the heap."""
    gc.collect()
    gc.freeze()
    trim()
