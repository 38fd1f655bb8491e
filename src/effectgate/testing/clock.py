"""Virtual time for in-process protocol tests."""

from __future__ import annotations

import asyncio


class FakeClock:
    """Call it for the time; `await clock.sleep(s)` advances it by `s` at once.

    Sleeps yield to the event loop once, so concurrent coroutines still interleave; no real
    time passes, so a test of a 30 s consistency window runs in milliseconds."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)
