"""The reconciler: resolves abandoned and UNKNOWN actions with no agent asking.

At start-up and then every `interval` (or as soon as work is signalled) it leases due actions —
PLANNED or DISPATCHED whose lease expired (a worker died), UNKNOWN whose re-check is due — and
drives each one: a DISPATCHED action is verified before anything is sent again. The background
runner makes the passes (`Reconciler.job`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from effectgate.gateway.background.runner import Job
from effectgate.gateway.core import EffectProtocol
from effectgate.gateway.model import ActionRecord, GatewayError, GatewayUnavailable
from effectgate.gateway.observability import metrics, telemetry

log = logging.getLogger("effectgate.reconciler")


class Reconciler:
    def __init__(self, protocol: EffectProtocol, *, interval: float, batch: int = 32, parallel: int = 8) -> None:
        self.protocol = protocol
        self.interval = interval
        self.batch = batch
        self._slots = asyncio.Semaphore(parallel)
        self._tasks: set[asyncio.Task[None]] = set()

    async def run_once(self) -> int:
        """Claims one batch of due work and starts driving it; returns how many were claimed."""
        claimed = await self.protocol.claim_due(self.batch)
        metrics.reconciler_claimed(claimed, self.protocol.now())
        for record in claimed:
            task = asyncio.create_task(telemetry.reconcile_span(record, self._drive(record)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(claimed)

    async def _drive(self, record: ActionRecord) -> None:
        action_id = record.action_id
        async with self._slots:
            try:
                settled = await self.protocol.drive_leased(record)
                log.info("reconciled %s -> %s (%s)", action_id, settled.state.value, settled.reason)
            except GatewayError as exc:  # the store went away, or the provider rate-limits
                log.warning("reconciling %s failed: %s", action_id, exc.message)
            except Exception:  # a bug in one action must not stop the others
                log.exception("reconciling %s failed", action_id)

    async def sweep(self) -> None:
        """One pass: claims batch after batch while a full one comes back (more is due right now)."""
        while await self.run_once() >= self.batch:
            pass

    def failed(self, exc: Exception) -> None:
        if isinstance(exc, GatewayUnavailable):  # the store may be down for a while: keep trying
            metrics.store_error("reconciler")
            log.warning("reconciler pass failed: %s", exc.message)
        else:  # a bug must not stop recovery for good: log it and go on
            log.error("reconciler pass failed", exc_info=exc)

    def job(self) -> Job:
        """A pass at start-up, then after `interval` or as soon as the protocol signals work."""
        return Job(
            "reconciler",
            self.sweep,
            self.interval,
            wait=self.protocol.wait_for_work,
            on_error=self.failed,
            close=self.stop,
        )

    async def stop(self) -> None:
        """Lets the drives it started finish."""
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
