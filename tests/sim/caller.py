"""A call into one replica, as the outside world sees it: an answer, a documented error, the
caller's deadline passing (the handler is cancelled, as grpc.aio does), or the process gone."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from effectgate.gateway.core import EffectProtocol, ExecuteCommand

DEADLINE, GONE = "deadline", "gone"


class Caller:
    def __init__(self, protocol: EffectProtocol, clock: Callable[[], float], died: asyncio.Event) -> None:
        self.protocol = protocol
        self.clock = clock
        self.died = died

    async def execute(self, cmd: ExecuteCommand, budget: float) -> Any:
        deadline = self.clock() + budget
        return await self.operate(self.protocol.execute(cmd, deadline), self.died, timeout=budget)

    @staticmethod
    async def operate(call: Awaitable[Any], died: asyncio.Event, timeout: float | None = None) -> Any:
        """The call's result, or the exception it raised, DEADLINE or GONE."""
        task = asyncio.ensure_future(call)
        task.add_done_callback(_retrieved)
        gone = asyncio.ensure_future(died.wait())
        try:
            done, _ = await asyncio.wait({task, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if died.is_set():
            return GONE  # a dead process answers nothing, even what it had ready
        if task not in done:
            task.cancel()
            return DEADLINE
        error = task.exception()
        return error if error is not None else task.result()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """An answer nobody reads any more (the caller gave up, the process died) is not an error."""
    if not task.cancelled():
        task.exception()


def retrieve_pending(loop: asyncio.AbstractEventLoop) -> None:
    """Runs the `_retrieved` callbacks still queued when a world ends (a call that finished with
    an exception at the world's last moment, its callback not yet run): left queued, the task's
    exception was reported as never retrieved whenever the garbage collector met it, in a later
    seed's run or never (seed 6489 in a run of seeds 6001..7000, not alone)."""
    ready: Any = getattr(loop, "_ready", ())  # asyncio's queue of callbacks (typeshed: none)
    for handle in list(ready):
        if handle._callback is _retrieved and not handle._cancelled:
            _retrieved(*handle._args)
            handle.cancel()  # (clears its arguments)


def close_unstarted(loop: asyncio.AbstractEventLoop) -> None:
    """Closes the coroutines of the tasks a world created at its last moment and never started
    (an Execute's drive task, `ExecutePath._run`): left to the collector, each printed "coroutine
    ... was never awaited" in whichever later world it was collected (three times in the long
    run's first 76,000 seeds). A coroutine that never started runs no code when closed: traces
    are unchanged. Before the loop closes: `loop.close()` drops its ready queue, often the only
    reference to such a task, which then goes (warned) before `World._close_frozen` sweeps the
    tasks still pending (tests/sim/test_sim.py shows both)."""
    for task in asyncio.all_tasks(loop):
        coro = task.get_coro()
        if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
            coro.close()
