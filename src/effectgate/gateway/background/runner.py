"""The runner of background work: named jobs, each run again and again at its interval until stopped.

A job is one pass (`run`) and a pause between passes: by default its interval on the injected
clock, or a wait of its own that may end sooner (the reconciler wakes as soon as work is
signalled). A pass that fails is counted and reported (by the job's `on_error`, else a logged
traceback) and the job runs again after its pause: background work never takes the gateway down.
`stop()` cancels the passes in progress (as the hand-made loops before it did), then runs each
job's `close` (the reconciler lets its drives finish, readiness waits for its last probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from effectgate.gateway.core import Clock

log = logging.getLogger("effectgate.background")


@dataclass(frozen=True)
class Job:
    name: str
    run: Callable[[], Awaitable[object]]
    interval: float
    # False: the first pass comes after one interval (the server made it by hand at start-up).
    at_start: bool = True
    # The pause between passes, given the runner's stop event and the interval (returns early
    # when stop is set); None: sleep the interval on the runner's clock.
    wait: Callable[[asyncio.Event, float], Awaitable[None]] | None = None
    # Reports a failed pass (its own log line and metric); None: a logged traceback.
    on_error: Callable[[Exception], None] | None = None
    # Runs once at stop, after the job's last pass has ended.
    close: Callable[[], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        if not (self.interval >= 0 and math.isfinite(self.interval)):  # 0: again at once (after a yield)
            raise ValueError(f"the interval of background job {self.name!r} must be a number of seconds")


class Runner:
    def __init__(self, clock: Clock, jobs: Iterable[Job]) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        for job in jobs:
            if job.name in self.jobs:
                raise ValueError(f"two background jobs named {job.name!r}")
            self.jobs[job.name] = job
        self.passes: Counter[str] = Counter()  # passes that ended well, by job
        self.failures: Counter[str] = Counter()  # passes that raised, by job
        self._stop = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        for name, job in self.jobs.items():
            self._tasks[name] = asyncio.create_task(self._loop(job), name=f"effectgate-{name}")

    def task(self, name: str) -> asyncio.Task[None]:
        return self._tasks[name]

    def alive(self, name: str) -> bool:
        """Whether the job still runs (False before start, after stop, or once its task ended)."""
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for job in self.jobs.values():
            if job.close is not None:
                await job.close()

    async def _loop(self, job: Job) -> None:
        if not job.at_start:
            await self._pause(job)
        while not self._stop.is_set():
            try:
                await job.run()
            except Exception as exc:
                self.failures[job.name] += 1
                if job.on_error is not None:
                    job.on_error(exc)
                else:
                    log.error("background job %s failed", job.name, exc_info=exc)
            else:
                self.passes[job.name] += 1
            await self._pause(job)

    async def _pause(self, job: Job) -> None:
        if self._stop.is_set():
            return
        if job.wait is not None:
            await job.wait(self._stop, job.interval)
            return
        # The clock's sleep alone: `stop()` cancels every job's task, which ends this sleep at once
        # (racing it against the stop event cost two futures and an `asyncio.wait` a pass).
        await self.clock.sleep(job.interval)
