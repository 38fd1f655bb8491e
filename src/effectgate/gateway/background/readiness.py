"""Health that means "ready": SERVING only while the store takes writes, the reconciler runs and
this replica's clock is within bound of the store's (background/clock_watch.py).

A probe writes the store's heartbeat (`Store.probe`: a row of its own table, never an action)
every `interval`, as a job of the background runner. A store that cannot be written (SQLite
locked by another process, PostgreSQL down or read-only) turns every health service NOT_SERVING
within about one interval plus `timeout`; SERVING again once a probe succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2

from effectgate.gateway.background.runner import Job
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.health")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Readiness:
    def __init__(
        self,
        store: Store,
        health: health_aio.HealthServicer,
        services: Sequence[str],
        *,
        interval: float,
        alive: Callable[[], bool],
        clock: Callable[[], float],
        timeout: float = 3.0,
        clock_problem: Callable[[], str] = lambda: "",
    ) -> None:
        self.store = store
        self.clock = clock
        self.health = health
        self.services = tuple(services)
        self.interval = interval
        self.timeout = timeout
        self.alive = alive
        # Why this replica's clock is not trusted ("" when it is): background/clock_watch.py.
        self.clock_problem = clock_problem
        self.serving: bool | None = None
        self.problem = "starting"  # why not ready ("" when ready)
        self._task: asyncio.Task[None] | None = None
        self._checking = asyncio.Lock()

    async def _probe(self) -> str:
        """ "" when a store write succeeded within `timeout`, else what is wrong.

        A slow probe is never cancelled (cancelling a store call mid-transaction could leave it
        half open); the next check waits on the same probe instead of starting another."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.store.probe(self.clock()))
            # A probe that outlived its check and then failed is read here, so its error is never
            # "unretrieved" (the next check starts another; the simulator's seed 847 found this).
            self._task.add_done_callback(lambda t: t.cancelled() or t.exception())
        # This check's own probe: a concurrent check may start the next one while we wait.
        task = self._task
        done, _ = await asyncio.wait({task}, timeout=self.timeout)
        if not done:
            return f"a store write did not finish within {self.timeout:g}s"
        error = task.exception()
        if error is None:
            return ""
        # The store's own words when they are safe to show (a full disk says "database or disk is full").
        detail = " ".join(str(error).split())[:200] or type(error).__name__
        return f"the store cannot be written ({detail})"

    async def check(self) -> bool:
        """Probes once and publishes the result; True when ready.

        Checks run one at a time (the job's, and one the clock watch asks for when the clock's
        verdict changes), and the clock's verdict is read after the probe: a check that started
        before the verdict changed cannot publish the old one over the new."""
        async with self._checking:
            problem = "the reconciler task stopped" if not self.alive() else await self._probe()
            problem = problem or self.clock_problem()
            return await self._publish(problem)

    async def _publish(self, problem: str) -> bool:
        ready = not problem
        self.problem = problem
        if ready != self.serving:
            if ready:
                log.info("ready: health SERVING")
            else:
                log.warning("not ready: %s; health NOT_SERVING", problem)
            for name in self.services:
                await self.health.set(name, SERVING if ready else NOT_SERVING)
            self.serving = ready
        return ready

    async def drain(self) -> None:
        """Waits for a probe still running (before the store closes)."""
        if self._task is not None:
            await asyncio.wait({self._task})
            if not self._task.cancelled():
                self._task.exception()  # retrieved: no "never retrieved" warning

    def job(self) -> Job:
        """Checks every `interval`; the server makes the first check itself, at start-up."""
        return Job("readiness", self.check, self.interval, at_start=False, close=self.drain)
