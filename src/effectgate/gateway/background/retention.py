"""Retention: a background task that deletes old finished actions, tool by tool.

Only terminal actions (CONFIRMED, REJECTED) are ever purged — `Store.purge` guarantees it — so
an action still in flight or awaiting an operator survives any retention. Deletes go in batches
so one purge never holds long locks or a long transaction. The background runner makes the
passes (`retention_job`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping

from effectgate.gateway.background.runner import Job
from effectgate.gateway.store import Store, StoreUnavailable

log = logging.getLogger(__name__)

BATCH = 1000


def check_retentions(retentions: Mapping[str, float]) -> None:
    for tool, seconds in retentions.items():
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"retention of {tool!r} must be a positive number of seconds")


async def purge_once(store: Store, retentions: Mapping[str, float], now: float, batch: int = BATCH) -> int:
    """Purges every tool's expired terminal actions; returns how many were deleted."""
    total = 0
    for tool, seconds in retentions.items():
        while True:
            deleted = await store.purge(tool, now - seconds, limit=batch)
            total += deleted
            if deleted < batch:
                break
            await asyncio.sleep(0)  # let the gateway's own work through between batches
    return total


def retention_job(store: Store, retentions: Mapping[str, float], interval: float, clock: Callable[[], float]) -> Job:
    """Purges at start and then every `interval` seconds.

    An unavailable store is logged and retried at the next tick: retention is housekeeping and
    must never take the gateway down."""
    check_retentions(retentions)
    if not interval > 0:
        raise ValueError("retention interval must be positive")

    async def purge() -> None:
        deleted = await purge_once(store, retentions, clock())
        if deleted:
            log.info("retention purged %d actions", deleted)

    return Job("retention", purge, interval, on_error=_failed)


def _failed(exc: Exception) -> None:
    if isinstance(exc, StoreUnavailable):
        log.warning("retention skipped: %s", exc)
    else:
        log.error("retention failed", exc_info=exc)
