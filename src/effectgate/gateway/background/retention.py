"""Retention: a background task that deletes old finished actions, tool by tool.

Only terminal actions (CONFIRMED, REJECTED) are ever purged — `Store.purge` guarantees it — so
an action still in flight or awaiting an operator survives any retention. Deletes go in batches
so one purge never holds long locks or a long transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping

from effectgate.gateway.store.base import Store, StoreUnavailable

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


async def run_retention(
    store: Store,
    retentions: Mapping[str, float],
    interval: float,
    stop: asyncio.Event,
    clock: Callable[[], float] = time.time,
) -> None:
    """Purges at start and then every `interval` seconds until `stop` is set.

    An unavailable store is logged and retried at the next tick: retention is housekeeping and
    must never take the gateway down."""
    check_retentions(retentions)
    if interval <= 0:
        raise ValueError("retention interval must be positive")
    while not stop.is_set():
        try:
            deleted = await purge_once(store, retentions, clock())
            if deleted:
                log.info("retention purged %d actions", deleted)
        except StoreUnavailable as exc:
            log.warning("retention skipped: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
