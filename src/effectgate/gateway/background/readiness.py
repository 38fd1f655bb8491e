"""Health that means "ready": SERVING only while the store takes writes, the reconciler runs and
this replica's clock is within bound of the store's (background/clock_watch.py).

A probe writes one tiny row every `interval` through the store's ordinary primitives (it takes
and at once lets lapse the lease of a fixed record no tenant can see: tenant "" is never a
principal's, its tool is never configured, its state is terminal so the reconciler and retention
leave it alone). A store
that cannot be written (SQLite locked by another process, PostgreSQL down or read-only) turns
every health service NOT_SERVING within about one interval plus `timeout`; SERVING again once a
probe succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2

from effectgate.gateway.model.domain import ActionRecord, State
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.health")
PROBE_ACTION_ID = "effectgate-readiness-probe"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def probe_record(now: float) -> ActionRecord:
    return ActionRecord(
        action_id=PROBE_ACTION_ID,
        tenant="",
        run_id="",
        step_id="",
        tool="__readiness_probe__",
        scope="",
        payload_type="",
        payload=b"",
        fingerprint="",
        state=State.CONFIRMED,
        created_at=now,
        updated_at=now,
    )


async def probe_store(store: Store, clock: Callable[[], float] = time.time) -> None:
    """Writes the probe row (a lease that expires at once: the fence grows, a real row change that
    must reach the disk); raises when the store cannot be written. `clock`: the protocol's."""
    now = clock()
    if await store.acquire_lease(PROBE_ACTION_ID, "readiness-probe", now, 0.0) is None:
        await store.insert_if_absent(probe_record(now))  # the first probe of this store


class Readiness:
    def __init__(
        self,
        store: Store,
        health: health_aio.HealthServicer,
        services: Sequence[str],
        *,
        interval: float,
        alive: Callable[[], bool],
        timeout: float = 3.0,
        clock: Callable[[], float] = time.time,
        clock_problem: Callable[[], str] = lambda: "",
    ) -> None:
        self.store = store
        self.health = health
        self.services = tuple(services)
        self.interval = interval
        self.timeout = timeout
        self.alive = alive
        self.clock = clock
        # Why this replica's clock is not trusted ("" when it is): background/clock_watch.py.
        self.clock_problem = clock_problem
        self.serving: bool | None = None
        self._task: asyncio.Task[None] | None = None

    async def _probe(self) -> str:
        """ "" when a store write succeeded within `timeout`, else what is wrong.

        A slow probe is never cancelled (cancelling a store call mid-transaction could leave it
        half open); the next check waits on the same probe instead of starting another."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(probe_store(self.store, self.clock))
        done, _ = await asyncio.wait({self._task}, timeout=self.timeout)
        if not done:
            return f"a store write did not finish within {self.timeout:g}s"
        error = self._task.exception()
        return f"the store cannot be written ({type(error).__name__})" if error else ""

    async def check(self) -> bool:
        """Probes once and publishes the result; True when ready."""
        problem = "the reconciler task stopped" if not self.alive() else self.clock_problem() or await self._probe()
        ready = not problem
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

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
