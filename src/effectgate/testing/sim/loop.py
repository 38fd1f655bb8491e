"""An asyncio event loop on virtual time, for deterministic simulation.

`loop.time()` is a number the loop owns: when nothing is ready to run, the loop jumps straight
to its next timer instead of waiting, so a 30 s consistency window or a 60 s lease passes in a
few microseconds and every `asyncio.sleep`, `asyncio.timeout` and `wait_for` is virtual. Same
inputs, same order of callbacks: the loop has no source of nondeterminism of its own.

It refuses real I/O (sockets, file descriptors, threads, subprocesses, DNS): a simulated world
has none, and one would make a run depend on the host. When nothing is ready and no timer is
left while the caller still waits for its result, the run can never finish: `Deadlock` is
raised (a simulator reports it as a violation: a liveness bug, or a lost wake-up).

The idea is CPython's test loop (`Lib/test/test_asyncio/utils.py`, `TestLoop`) and
TigerBeetle's `testing/time.zig`: time is a value the harness advances, not a clock it reads.
"""

from __future__ import annotations

import asyncio
from asyncio import base_events
from collections.abc import Callable
from typing import Any

# asyncio's housekeeping and one-off callbacks are never more than this far apart when work is
# outstanding; a jump this long with nothing happening is a run that lost track of time.
_FAR = 10.0 * 365 * 24 * 3600


class Deadlock(Exception):
    """Nothing can run and no timer is set, yet the awaited result is not there."""


class RealIORefused(RuntimeError):
    """A simulated run tried to use the real world (a socket, a thread, a process)."""


class _Jump:
    """The loop's selector: it never waits; asked to wait `timeout`, it advances time by it."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Deadlock("nothing can run and no timer is set")
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        pass


class VirtualLoop(base_events.BaseEventLoop):
    """An event loop whose time is virtual (starts at `start`, moves only when it idles)."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._now = start
        self._selector = _Jump(self)
        self._clock_resolution = 1e-9
        self.jumps = 0  # how many times time moved (a measure of a run's length)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            if seconds > _FAR:
                raise Deadlock(f"the next timer is {seconds:.0f}s away")
            self._now += seconds
            self.jumps += 1

    # -- what a selector loop would do with file descriptors: nothing here -----------------------

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # call_soon_threadsafe: only this thread runs, so the callback is seen at once

    def close(self) -> None:
        super().close()
        self._selector.close()

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise RealIORefused("a simulated run has no real I/O (sockets, threads, processes, DNS)")

    # Refused outright, whatever their signatures say they take.
    add_reader = remove_reader = add_writer = remove_writer = _refuse  # type: ignore[assignment]
    sock_recv = sock_sendall = sock_connect = sock_accept = _refuse

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:  # type: ignore[override]
        self._refuse()

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()

    async def subprocess_exec(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()

    async def subprocess_shell(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()


def run(main: Callable[[], Any], *, start: float = 0.0) -> Any:
    """Runs the coroutine `main()` on a fresh virtual loop and closes it; its result."""
    loop = VirtualLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
