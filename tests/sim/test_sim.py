"""The deterministic simulator in the suite: `make test` runs the budget `make sim` runs (SEEDS
seeds from SEED, in chunks that pytest-xdist deals out), each with no violation; the same seeds
give the same digest twice in one process and under another PYTHONHASHSEED in another."""

from __future__ import annotations

import gc
import hashlib
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from effectgate.gateway.model.errors import GatewayUnavailable
from effectgate.testing.sim.loop import VirtualLoop
from tests.sim import caller, mutants, run, shrink
from tests.sim.world import LATER, WHOLE, Knobs, Outcome, World, sized

# The worlds the first regressions found their defects in: the full size, without what was
# simulated later.
FIRST = replace(WHOLE, off=LATER)

ROOT = Path(__file__).resolve().parents[2]
# Small chunks: xdist deals them out, and each ends well within the timeout on a loaded machine.
CHUNKS = 20
CHUNK = run.SEEDS // CHUNKS


def _failures(outcomes: list[object]) -> str:
    lines = []
    for outcome in outcomes:
        if outcome.violations:  # type: ignore[attr-defined]
            lines.append(f"seed {outcome.seed}: {outcome.violations} -> {run.replay_command(outcome.seed)}")  # type: ignore[attr-defined]
    return "\n".join(lines)


@pytest.mark.timeout(300)  # about 3 s of one core; the suite's machine may be many times slower
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_protocol_keeps_its_promises_in_every_simulated_world(chunk: int) -> None:
    first = run.SEED + chunk * CHUNK
    outcomes, _ = run.run(CHUNK, first)
    assert not _failures(outcomes), _failures(outcomes)  # type: ignore[arg-type]
    events = sum(o.counts["events"] for o in outcomes)
    assert events >= 50 * CHUNK, f"{events} events in {CHUNK} seeds: the worlds are too small to say much"
    faults = sum(outcomes[0].counts.values(), 0)
    assert faults > 0


@pytest.mark.timeout(300)
def test_one_seed_one_trace_in_this_process_and_under_another_hash_seed() -> None:
    seeds, first = 40, 7001
    _, digest = run.run(seeds, first)
    _, again = run.run(seeds, first)
    assert again == digest
    env = {**os.environ, "PYTHONHASHSEED": "12345" if os.environ.get("PYTHONHASHSEED") != "12345" else "999"}
    other = subprocess.run(
        [sys.executable, "-m", "tests.sim.run", "--seeds", str(seeds), "--seed", str(first)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=280,
    )
    last = other.stdout.strip().splitlines()[-1]
    assert last == f"sim: {seeds} seeds, {last.split(', ')[1]}, 0 violations, digest {digest}", other.stdout[-2000:]


def test_a_failing_seed_prints_its_trace_and_the_command_that_replays_it(capsys: pytest.CaptureFixture[str]) -> None:
    outcome = World(3).run()
    outcome.violations.append("a violation planted by this test")
    run.report(outcome)
    printed = capsys.readouterr().out
    assert printed.startswith("seed 3: 1 violation(s)")
    assert "violated: a violation planted by this test" in printed
    assert printed.rstrip().endswith("replay: make sim SEEDS=1 SEED=3")
    assert any(" effect " in line or " request " in line for line in printed.splitlines())


def test_a_seed_that_fails_only_after_others_is_said_to_and_replayed_with_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    outcome = World(3).run()
    outcome.violations.append("a violation planted by this test")  # seed 3 alone does not fail
    run.report_shrunk(outcome, Knobs(), first=1)
    printed = capsys.readouterr().out
    assert printed.startswith("shrunk: seed 3 does not fail alone, only after the seeds before it")
    assert printed.rstrip().endswith("replay: make sim SEEDS=3 SEED=1")


def _unawaited_after_the_end(end: Callable[[VirtualLoop], object]) -> list[str]:
    """The "never awaited" warnings of a task created as its loop's run ends (never started),
    once `end` has ended the loop."""
    loop = VirtualLoop()
    loop.set_exception_handler(lambda *_: None)  # "Task was destroyed but it is pending": expected
    started: list[bool] = []

    async def drive() -> None:
        started.append(True)

    async def last_moment() -> None:
        loop.stop()  # the run ends with this step: the task below never starts
        loop.create_task(drive())

    loop.create_task(last_moment())
    loop.run_forever()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        end(loop)
        gc.collect()
    assert started == []
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


def _close_then_sweep(loop: VirtualLoop) -> None:
    """What `World._close_frozen` does last: every task still pending closed, after `loop.close()`."""
    loop.close()
    for task in loop.pending_tasks():
        task.get_coro().close()


def _close_unstarted_then_close(loop: VirtualLoop) -> None:
    """`World.run`'s end: the unstarted coroutines closed, then the loop."""
    caller.close_unstarted(loop)
    loop.close()


def test_a_task_created_as_the_world_ends_leaves_no_coroutine_unawaited() -> None:
    assert _unawaited_after_the_end(VirtualLoop.close)  # the collector's warning, as seen in the long run
    # Not the sweep of pending tasks that ends a world: `loop.close()` drops the ready queue, the
    # only reference to a task that never started, so the task is gone (warned) before the sweep.
    assert _unawaited_after_the_end(_close_then_sweep)
    assert _unawaited_after_the_end(_close_unstarted_then_close) == []


def test_seed_122_proves_no_absence_with_a_clock_anchored_on_a_stalled_probe() -> None:
    """The regression of the first defect the simulator found (StoreClock took a 36 s first probe
    as its anchor: tests/test_store_clock.py has the unit test)."""
    outcome = World(122, FIRST).run()
    assert any("stall r2 before store.read" in line for line in outcome.trace[:5])
    assert outcome.violations == []


def test_seed_847_leaves_no_store_error_unretrieved() -> None:
    """The regression of the second defect the simulator found: a readiness probe that outlived
    its check and then failed (a commit whose answer was lost) was replaced by the next check's
    probe with its error never read ("Task exception was never retrieved" in the gateway's log)."""
    outcome = World(847, FIRST).run()
    assert outcome.counts["store_commit_unknown"] >= 1
    assert outcome.violations == []


def test_seed_1440_proves_no_absence_from_an_intent_stamped_before_a_stall() -> None:
    """The regression of the third defect the simulator found: a replica stamped an action's
    `dispatched_at`, stalled 10 s before the intent's write, then sent; the replica that took the
    action over measured the provider's time from the stale stamp and recorded NOT_FOUND 3 s after
    the provider applied it (read lag still inside the window). The driver now moves a stamp older
    than `STALE_INTENT` to the moment of sending (core/protocol/driver.py)."""
    outcome = World(1440, FIRST).run()
    assert any(line.endswith("before store.write for 10.257s") for line in outcome.trace)
    assert outcome.violations == []


def test_a_failing_seed_shrinks_to_a_smaller_world_that_still_fails_and_replays() -> None:
    """The shrinker on real worlds, with "fails" standing for "the provider lost an answer": it
    switches off what that failure does not need, keeps the lost answers, and its command's knobs
    replay the shrunk trace exactly."""

    def lost_an_answer(outcome: Outcome) -> bool:
        return outcome.counts["provider_lost_answer"] > 0

    seed = next(s for s in range(1, 50) if lost_an_answer(World(s).run()))
    knobs, shrunk = shrink.shrink(seed, fails=lost_an_answer, budget=30)
    assert lost_an_answer(shrunk)
    assert "lost" not in knobs.off
    drawn = sized(seed, Knobs())
    assert knobs != drawn and (knobs.off or (knobs.agents or 0) < (drawn.agents or 0))
    assert World(seed, knobs).run().digest == shrunk.digest
    command = shrink.command(seed, knobs)
    assert command.startswith(f"python -m tests.sim.run --seeds 1 --seed {seed}")
    replayed = subprocess.run(
        [sys.executable, "-m", *command.split()[2:]], cwd=ROOT, capture_output=True, text=True, check=False, timeout=280
    )
    assert replayed.stdout.strip().splitlines()[-1].endswith(f"digest {_digest_of([shrunk])}"), replayed.stdout[-2000:]


def _digest_of(outcomes: list[Outcome]) -> str:
    digest = hashlib.sha256()
    for outcome in outcomes:
        digest.update(outcome.digest.encode())
    return digest.hexdigest()


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_mutant_still_names_a_line_of_the_code(mutant: mutants.Mutant) -> None:
    """`make sim-mutants` reports a mutant whose line moved as stale, not caught: the suite sees
    the drift at once (the run itself takes minutes and is not part of `make test`)."""
    for path, old, _new in ((mutant.path, mutant.old, mutant.new), *mutant.also):
        text = (mutants.ROOT / "src" / path).read_text()
        assert text.count(old) == 1, f"{mutant.name}: {old.strip()!r} is not once in {path}"


def test_an_error_a_world_leaves_unread_is_reported_on_its_own_seed_and_in_its_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A world that leaves a future holding an exception nobody reads, freed only by the garbage
    collector (a cycle), fails its own seed, with the report in its trace (and so its digest), not
    whenever the collector happens to run (tests/sim/leftovers.py). The collector is off here, as
    it may well be for the rest of a chunk: only the simulator's own collection can report it."""
    main = World._main

    async def leaving(self: World) -> None:
        await main(self)
        if self.seed == 3:
            left = self.loop.create_future()
            left.set_exception(GatewayUnavailable("left unread"))
            cycle: list[object] = [left]
            cycle.append(cycle)  # freed by the collector only

    monkeypatch.setattr(World, "_main", leaving)
    enabled = gc.isenabled()
    gc.disable()
    try:
        outcomes, _ = run.run(2, 3)
    finally:
        if enabled:
            gc.enable()
    report = "loop error: Future exception was never retrieved GatewayUnavailable('left unread')"
    assert outcomes[0].violations == [report]
    assert outcomes[0].trace[-1].endswith(f"VIOLATION {report}")
    assert outcomes[1].violations == []
