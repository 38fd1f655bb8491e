"""A call into one replica, as the outside world sees it: an answer, a documented error, the
caller's deadline passing (the handler is cancelled, as grpc.aio does), or the process gone."""

from __future__ import annotations

import asyncio
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
