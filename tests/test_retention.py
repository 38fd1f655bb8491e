"""Retention on both store backends: only old terminal actions of tools with a retention go."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from effectgate.gateway.background.retention import purge_once, retention_job
from effectgate.gateway.background.runner import Runner
from effectgate.gateway.model.domain import State
from effectgate.gateway.store import Store
from tests.store_backends import Backend, record


async def ids(store: Store, *candidates: str) -> set[str]:
    return {c for c in candidates if await store.get(c) is not None}


class SetClock:
    """Time set by the test; real sleeps (the stores run in real time)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def retention(store: Store, retentions: dict[str, float], interval: float, clock: SetClock) -> Runner:
    runner = Runner(clock, [retention_job(store, retentions, interval, clock)])
    runner.start()
    return runner


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if await check():
                return
            await asyncio.sleep(0.01)


async def test_run_retention_purges_old_terminal_actions_only(backend: Backend) -> None:
    store = await backend.store()
    old_states = {s: record(f"pay-{s.value}", tool="pay", state=s, created_at=0.0) for s in State}
    for rec in [
        *old_states.values(),
        record("pay-recent", tool="pay", state=State.CONFIRMED, created_at=950.0),
        record("refund-old", tool="refund", state=State.REJECTED, created_at=900.0),
        record("refund-recent", tool="refund", state=State.CONFIRMED, created_at=960.0),
        record("email-old", tool="email", state=State.CONFIRMED, created_at=0.0),
    ]:
        await store.insert_if_absent(rec)
    clock = SetClock(1_000.0)
    runner = retention(store, {"pay": 100.0, "refund": 50.0}, 0.02, clock)
    gone = {"pay-CONFIRMED", "pay-REJECTED", "refund-old"}
    every = {r.action_id for r in old_states.values()} | {
        "pay-recent",
        "refund-old",
        "refund-recent",
        "email-old",
    }
    await eventually(lambda: _equals(ids(store, *every), every - gone))
    # Time passes: the recent ones age out on a later tick; in-flight ones never do.
    clock.now = 10_000.0
    gone |= {"pay-recent", "refund-recent"}
    await eventually(lambda: _equals(ids(store, *every), every - gone))
    await asyncio.wait_for(runner.stop(), 1.0)
    left = await ids(store, *every)
    assert left == {f"pay-{s.value}" for s in State if not s.terminal} | {"email-old"}


async def test_purge_once_drains_in_batches(backend: Backend) -> None:
    store = await backend.store()
    for i in range(7):
        await store.insert_if_absent(record(f"c{i}", tool="pay", state=State.CONFIRMED))
    assert await purge_once(store, {"pay": 1.0}, now=5_000.0, batch=2) == 7
    assert await purge_once(store, {"pay": 1.0}, now=5_000.0, batch=2) == 0


async def test_unavailable_store_does_not_stop_retention(backend: Backend) -> None:
    store = await backend.store()
    await store.insert_if_absent(record("old", tool="pay", state=State.CONFIRMED, created_at=0.0))
    await backend.block_writes()
    runner = retention(store, {"pay": 1.0}, 0.05, SetClock(100.0))
    await eventually(lambda: _true(runner.failures["retention"] >= 2))  # skipped, and tried again
    assert runner.alive("retention")
    await backend.unblock_writes()
    # PostgreSQL sessions opened while blocked stay read-only: a fresh instance does the purge.
    fresh = await backend.store()
    fresh_runner = retention(fresh, {"pay": 1.0}, 0.05, SetClock(100.0))
    await eventually(lambda: _equals(ids(fresh, "old"), set()))
    await asyncio.wait_for(asyncio.gather(runner.stop(), fresh_runner.stop()), 2.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_retention_is_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        retention_job(None, {"pay": bad}, 1.0, SetClock(0.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        retention_job(None, {"pay": 1.0}, bad, SetClock(0.0))  # type: ignore[arg-type]


async def _true(value: bool) -> bool:
    return value


async def _equals(found: Awaitable[set[str]], expected: set[str]) -> bool:
    return await found == expected
