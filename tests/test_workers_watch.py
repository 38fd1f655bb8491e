"""A worker stops when the parent it was started by is gone, judged against the pid it read before
saying it was ready: read later, a reaper's pid would look like a live parent forever."""

from __future__ import annotations

import asyncio
import os

from effectgate.gateway.runtime.workers import watch_parent


async def test_a_worker_whose_parent_already_died_stops_at_once() -> None:
    stop = asyncio.Event()
    gone = os.getppid() + 4_000_000  # not our parent now: it died and we were reparented
    await asyncio.wait_for(watch_parent(stop, gone, interval=0.05), 10)
    assert stop.is_set()


async def test_a_worker_with_its_parent_alive_keeps_serving_until_stopped() -> None:
    stop = asyncio.Event()
    watcher = asyncio.create_task(watch_parent(stop, os.getppid(), interval=0.05))
    await asyncio.sleep(0.3)
    assert not watcher.done() and not stop.is_set()
    stop.set()
    await asyncio.wait_for(watcher, 10)
