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

A simulation is nothing but callbacks, so the loop's own bookkeeping is a large share of its
cost: `call_soon`, `call_at` and `_run_once` are asyncio's own, written out for a loop that never
waits and makes no debug-mode checks (which would time callbacks on the virtual clock). They run the
same callbacks in the same order: the timers' heap holds `(when, NaN, handle)` entries, which
compare as asyncio's `TimerHandle`s do (by `when`, and a tie is "not less" either way: NaN is
neither equal nor less) but without a Python-level `__lt__` at every comparison.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from asyncio import base_events, events, format_helpers
from collections.abc import Callable
from typing import Any

# asyncio's housekeeping and one-off callbacks are never more than this far apart when work is
# outstanding; a jump this long with nothing happening is a run that lost track of time.
_FAR = 10.0 * 365 * 24 * 3600
# The second element of a timer's heap entry: never equal, never less, so a tie on `when` is
# settled as asyncio settles it (neither entry is less), without comparing the handles.
_TIE = float("nan")
# asyncio's own constants for `_run_once` (base_events.py), which typeshed does not declare.
_BASE: Any = base_events
_MIN_TIMERS: int = _BASE._MIN_SCHEDULED_TIMER_HANDLES
_MIN_CANCELLED: float = _BASE._MIN_CANCELLED_TIMER_HANDLES_FRACTION
_LONGEST_WAIT: float = _BASE.MAXIMUM_SELECT_TIMEOUT
_FORMAT: Any = format_helpers
_format_callback = _FORMAT._format_callback_source


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
        self._count = itertools.count()  # numbers its tasks and futures in the order it made them
        _anyio_scopes_in_order()

    def create_task(  # type: ignore[override]
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        # `BaseEventLoop.create_task` written out for a loop without a task factory (one set is
        # still used) and never in debug mode (no creation traceback to trim).
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        if self._task_factory is None:  # type: ignore[attr-defined]
            return Task(next(self._count), coro, loop=self, name=name, context=context)
        return super().create_task(coro, name=name, context=context)

    def create_future(self) -> asyncio.Future[Any]:
        return Future(next(self._count), loop=self)

    def pending_tasks(self) -> list[asyncio.Task[Any]]:
        """The tasks it created that have not finished, in the order it created them (a set of
        tasks, as `asyncio.all_tasks` gives, has the order of their hashes)."""
        return sorted(asyncio.all_tasks(self), key=hash)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            if seconds > _FAR:
                raise Deadlock(f"the next timer is {seconds:.0f}s away")
            self._now += seconds
            self.jumps += 1

    # -- asyncio's scheduling, without what a virtual loop never needs ---------------------------
    # (asyncio's debug mode checks, which would time callbacks on this virtual clock, are not made.)

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.Handle:
        # `events.Handle(...)` without its `__init__`: this runs for nearly every callback of a run.
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle: Any = _handle_new(_Handle)
        handle._context = _copy_context() if context is None else context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)  # type: ignore[attr-defined]
        return handle  # type: ignore[no-any-return]

    def call_later(  # type: ignore[override]
        self, delay: float, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self._timer(self._now + delay, callback, args, context)

    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> events.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        return self._timer(when, callback, args, context)

    def _timer(
        self, when: float, callback: Callable[..., Any], args: tuple[Any, ...], context: contextvars.Context | None
    ) -> events.TimerHandle:
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        timer: Any = _handle_new(_TimerHandle)
        timer._context = _copy_context() if context is None else context
        timer._loop = self
        timer._callback = callback
        timer._args = args
        timer._cancelled = False
        timer._repr = None
        timer._source_traceback = None
        timer._when = when
        _heappush(self._scheduled, (when, _TIE, timer))  # type: ignore[attr-defined]
        timer._scheduled = True
        return timer  # type: ignore[no-any-return]

    def _run_once(self) -> None:
        """`BaseEventLoop._run_once` for heap entries, the selector's jump inlined, called again
        until the loop is stopped (what `run_forever` does after each call)."""
        me: Any = self  # asyncio's private attributes, which typeshed does not declare
        ready = me._ready
        popleft = ready.popleft
        while True:
            scheduled = me._scheduled
            count = len(scheduled)
            if count > _MIN_TIMERS and me._timer_cancelled_count / count > _MIN_CANCELLED:
                kept = []
                for entry in scheduled:
                    if entry[2]._cancelled:
                        entry[2]._scheduled = False
                    else:
                        kept.append(entry)
                heapq.heapify(kept)
                me._scheduled = scheduled = kept
                me._timer_cancelled_count = 0
            else:
                while scheduled and scheduled[0][2]._cancelled:
                    me._timer_cancelled_count -= 1
                    _heappop(scheduled)[2]._scheduled = False
            if not ready and not me._stopping:
                if not scheduled:
                    raise Deadlock("nothing can run and no timer is set")
                self.advance(min(max(0, scheduled[0][0] - self._now), _LONGEST_WAIT))
            end = self._now + self._clock_resolution
            while scheduled and scheduled[0][0] < end:
                timer = _heappop(scheduled)[2]
                timer._scheduled = False
                ready.append(timer)
            handle: Any = None
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # what `Handle._run` does with it
                    cb = _format_callback(handle._callback, handle._args)
                    self.call_exception_handler(
                        {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
                    )
            handle = None  # breaks a cycle when an exception occurred
            if me._stopping:
                return

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


class _Handle(events.Handle):
    """`events.Handle` whose `cancel` does not ask the loop whether it is in debug mode (it never is)."""

    __slots__ = ()

    def cancel(self) -> None:
        if not self._cancelled:
            me: Any = self
            me._cancelled = True
            me._callback = None
            me._args = None


class _TimerHandle(events.TimerHandle):
    """`events.TimerHandle` whose `cancel` does what asyncio's does (the loop counts a cancelled
    timer still in its heap) without two more calls and a question about debug mode."""

    __slots__ = ()

    def cancel(self) -> None:
        if not self._cancelled:
            me: Any = self
            if me._scheduled:
                me._loop._timer_cancelled_count += 1
            me._cancelled = True
            me._callback = None
            me._args = None


class Task(asyncio.Task):  # type: ignore[type-arg]
    """The loop's task: asyncio's, hashed as the number of its making, not by its address in
    memory (and named as asyncio's: its reports, which can end up in a trace, name the class).

    Libraries keep tasks in sets and act on them in the set's order: anyio's cancel scope cancels
    its tasks, and asyncio's `wait` hands back what finished, in the order of their hashes. By
    address, that order was the order of wherever the allocator put each task, which depends on
    what the process ran before: the same seed gave another trace after other worlds (seed 74494
    of the long run). By number, the same run makes the same numbers, so the same order."""

    def __init__(self, number: int, coro: Any, **kwargs: Any) -> None:
        self._number = number  # before asyncio's `__init__`, which puts the task in a set
        super().__init__(coro, **kwargs)

    def __hash__(self) -> int:
        return self._number


class Future(asyncio.Future):  # type: ignore[type-arg]
    """The loop's future: asyncio's, and it hashes as the number of its making (see `Task`)."""

    def __init__(self, number: int, **kwargs: Any) -> None:
        self._number = number
        super().__init__(**kwargs)

    def __hash__(self) -> int:
        return self._number


class _InOrder(dict[Any, None]):
    """A set that iterates in the order its members came in (what `set` is to anyio, kept in order)."""

    def add(self, member: Any) -> None:
        self[member] = None

    def remove(self, member: Any) -> None:
        del self[member]

    def discard(self, member: Any) -> None:
        self.pop(member, None)


def _anyio_scopes_in_order() -> None:
    """Makes anyio's cancel scopes keep their child scopes in the order they were entered.

    A cancelled scope cancels its child scopes' tasks in the order of its set of children, and a
    scope hashes by its address: the same seed cancelled the MCP upstream's sessions in another
    order after other worlds had run in the process, and so gave another trace (seed 74494 of the
    long run). anyio keeps the set in a slot of each scope, so the set is swapped for an ordered
    one as the scope is made; nothing else about anyio changes, and nothing if it is not
    installed (the `mcp` extra brings it)."""
    try:
        from anyio._backends import _asyncio as anyio_asyncio
    except ImportError:
        return
    scope: Any = anyio_asyncio.CancelScope
    if getattr(scope.__init__, "_in_order", False):
        return
    made = scope.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self._child_scopes = _InOrder()

    __init__._in_order = True  # type: ignore[attr-defined]
    scope.__init__ = __init__


_handle_new = events.Handle.__new__
_copy_context = contextvars.copy_context
_heappush, _heappop = heapq.heappush, heapq.heappop


def run(main: Callable[[], Any], *, start: float = 0.0) -> Any:
    """Runs the coroutine `main()` on a fresh virtual loop and closes it; its result."""
    loop = VirtualLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
