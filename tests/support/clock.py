"""Virtual time for asyncio tests: timers fire at once, in order, and no test waits for them.

``run_in_virtual_time(main, monkeypatch, module…)`` runs ``main()`` on an event loop whose clock
moves only when nothing is ready to run: it jumps to the next timer (``asyncio.sleep``,
``wait_for``'s timeout, tenacity's waits) instead of waiting for it. The given modules' ``time``
is replaced by one whose ``monotonic()`` is that clock (the syncer reads ``time.monotonic()``).

Work in a worker thread (``run_in_executor``, as the syncer's compile + commit) takes no virtual
time: while one runs, the loop waits for it in real time and the clock stands still. So a test
asserts exact figures (a 0.5 s backoff is 0.5 s), whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
import time
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, TypeVar, TypeVarTuple

import pytest

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# While a worker thread runs, the loop polls its selector at this real interval.
_THREAD_POLL = 0.05


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        self.threads = 0
        super().__init__(_Selector(self))  # type: ignore[arg-type]

    def time(self) -> float:
        return self.now

    def run_in_executor(
        self, executor: concurrent.futures.Executor | None, func: Callable[[*Ts], T], *args: *Ts
    ) -> asyncio.Future[T]:
        fut = super().run_in_executor(executor, func, *args)
        self.threads += 1
        fut.add_done_callback(self._thread_done)
        return fut

    def _thread_done(self, _: object) -> None:
        self.threads -= 1


class _Selector:
    """The loop's selector: returns what is ready; when nothing is and a timer is next, moves
    the clock to it; waits for real only for a worker thread (or with no timer at all)."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        if self._loop.threads:
            return self._real.select(_THREAD_POLL if timeout is None else min(timeout, _THREAD_POLL))
        if timeout is None:
            return self._real.select(None)
        self._loop.now += timeout
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Time:
    """The ``time`` module, but ``monotonic()`` reads the virtual clock."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop

    def monotonic(self) -> float:
        return self._loop.now

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def run_in_virtual_time(
    main: Callable[[], Coroutine[Any, Any, T]], monkeypatch: pytest.MonkeyPatch, *modules: ModuleType
) -> T:
    loop = VirtualClockLoop()
    for module in modules:
        monkeypatch.setattr(module, "time", _Time(loop))
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main())
