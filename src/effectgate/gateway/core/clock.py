"""The clock every time-based decision reads: `clock()` for the time, `await clock.sleep(s)` to wait.

Injected from the server down (protocol, RPC deadlines, background jobs), so tests can run on
virtual time (`effectgate.testing.FakeClock` has the same shape).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def __call__(self) -> float:
        """Unix seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real time: `time.time()` and `asyncio.sleep`."""

    def __call__(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
