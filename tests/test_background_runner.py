"""The background runner on the kit's virtual clock: jobs run at their intervals, a failing pass
is reported and retried, stop ends every job (a pass in progress too) and closes them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from effectgate.gateway.background.runner import Job, Runner
from effectgate.testing import FakeClock


class Passes:
    """A job's passes: the virtual time of each; `reached` is set at the `until`-th."""

    def __init__(self, clock: FakeClock, until: int, *, failing: int = 0) -> None:
        self.clock = clock
        self.until = until
        self.failing = failing
        self.times: list[float] = []
        self.reached = asyncio.Event()

    async def __call__(self) -> None:
        self.times.append(self.clock())
        if len(self.times) >= self.until:
            self.reached.set()
        if len(self.times) <= self.failing:
            raise RuntimeError(f"pass {len(self.times)} broke")


async def test_a_job_runs_at_start_and_then_every_interval() -> None:
    clock = FakeClock()
    start = clock()
    passes = Passes(clock, until=4)
    runner = Runner(clock, [Job("tick", passes, 5.0)])
    runner.start()
    await asyncio.wait_for(passes.reached.wait(), 10)
    await runner.stop()
    assert passes.times[:4] == [start, start + 5, start + 10, start + 15]
    assert set(clock.slept) == {5.0}
    assert runner.passes["tick"] >= 3 and runner.failures["tick"] == 0


async def test_a_job_not_at_start_waits_one_interval_first() -> None:
    clock = FakeClock()
    start = clock()
    passes = Passes(clock, until=2)
    runner = Runner(clock, [Job("later", passes, 2.0, at_start=False)])
    runner.start()
    await asyncio.wait_for(passes.reached.wait(), 10)
    await runner.stop()
    assert passes.times[:2] == [start + 2, start + 4]


async def test_an_interval_of_zero_runs_again_at_once() -> None:
    clock = FakeClock()
    start = clock()
    passes = Passes(clock, until=3)
    runner = Runner(clock, [Job("busy", passes, 0.0)])
    runner.start()
    await asyncio.wait_for(passes.reached.wait(), 10)
    await runner.stop()
    assert passes.times[:3] == [start] * 3


async def test_each_job_keeps_its_own_interval() -> None:
    clock = FakeClock()
    fast, slow = Passes(clock, until=6), Passes(clock, until=2)
    runner = Runner(clock, [Job("fast", fast, 1.0), Job("slow", slow, 7.0)])
    runner.start()
    await asyncio.wait_for(asyncio.gather(fast.reached.wait(), slow.reached.wait()), 10)
    await runner.stop()
    # The kit's clock sleeps at once, so both jobs loop at the same pace: what each one slept
    # between its passes is what shows its interval.
    assert set(clock.slept) == {1.0, 7.0}
    assert clock.slept.count(1.0) >= 5 and clock.slept.count(7.0) >= 1


async def test_a_failing_pass_is_logged_counted_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    start = clock()
    passes = Passes(clock, until=4, failing=2)
    runner = Runner(clock, [Job("flaky", passes, 3.0)])
    with caplog.at_level(logging.ERROR, logger="effectgate.background"):
        runner.start()
        await asyncio.wait_for(passes.reached.wait(), 10)
        assert runner.alive("flaky")
        await runner.stop()
    assert passes.times[:4] == [start, start + 3, start + 6, start + 9]  # failures keep the pace
    assert runner.failures["flaky"] == 2 and runner.passes["flaky"] >= 2
    failed = [r for r in caplog.records if r.getMessage() == "background job flaky failed"]
    assert len(failed) == 2 and all(r.exc_info for r in failed)


async def test_a_job_reports_its_own_failures() -> None:
    clock = FakeClock()
    passes = Passes(clock, until=3, failing=3)
    reported: list[str] = []
    runner = Runner(clock, [Job("quiet", passes, 1.0, on_error=lambda exc: reported.append(str(exc)))])
    runner.start()
    await asyncio.wait_for(passes.reached.wait(), 10)
    await runner.stop()
    assert reported[:3] == ["pass 1 broke", "pass 2 broke", "pass 3 broke"]
    assert runner.failures["quiet"] == len(reported)


async def test_a_job_may_wait_on_its_own_signal() -> None:
    clock = FakeClock()
    passes = Passes(clock, until=3)
    work, waiting = asyncio.Event(), asyncio.Event()
    waits: list[float] = []

    async def wait(stop: asyncio.Event, timeout: float) -> None:
        waits.append(timeout)
        work.clear()
        waiting.set()
        waiters = [asyncio.ensure_future(work.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    runner = Runner(clock, [Job("woken", passes, 60.0, wait=wait)])
    runner.start()
    for _ in range(2):
        await asyncio.wait_for(waiting.wait(), 10)
        waiting.clear()
        work.set()
    await asyncio.wait_for(passes.reached.wait(), 10)
    await runner.stop()
    assert waits[:2] == [60.0, 60.0] and clock.slept == []  # woken by the signal, no sleeping


async def test_stop_ends_every_job_and_closes_them() -> None:
    clock = FakeClock()
    started, cancelled = asyncio.Event(), asyncio.Event()
    closed: list[str] = []

    async def stuck() -> None:  # a pass in progress at stop
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def close(name: str) -> None:
        closed.append(name)

    idle = Passes(clock, until=1)
    runner = Runner(
        clock,
        [
            Job("stuck", stuck, 1.0, close=lambda: close("stuck")),
            Job("idle", idle, 3600.0, close=lambda: close("idle")),
            Job("never", idle, 3600.0, at_start=False),
        ],
    )
    runner.start()
    await asyncio.wait_for(asyncio.gather(started.wait(), idle.reached.wait()), 10)
    assert all(runner.alive(name) for name in ("stuck", "idle", "never"))
    await asyncio.wait_for(runner.stop(), 10)
    assert cancelled.is_set()
    assert not any(runner.alive(name) for name in ("stuck", "idle", "never"))
    assert all(runner.task(name).done() for name in ("stuck", "idle", "never"))
    assert closed == ["stuck", "idle"]


async def test_a_job_that_ended_is_not_alive() -> None:
    clock = FakeClock()
    runner = Runner(clock, [Job("short", Passes(clock, until=1), 1.0)])
    assert not runner.alive("short")  # not started
    runner.start()
    runner.task("short").cancel()
    await asyncio.sleep(0)
    assert not runner.alive("short")
    await runner.stop()


def test_bad_jobs_are_refused() -> None:
    clock = FakeClock()
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            Job("bad", Passes(clock, until=1), bad)
    with pytest.raises(ValueError):
        Runner(clock, [Job("twice", Passes(clock, until=1), 1.0), Job("twice", Passes(clock, until=1), 1.0)])
