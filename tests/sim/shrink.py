"""Shrinking a failing seed: the same seed run again with less in it (fewer agents, steps and
replicas, one fault kind switched off at a time), keeping each cut after which it still fails, until
no cut keeps it failing. What is left is a shorter trace that shows the same kind of failure, and
the command that replays it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from tests.sim.leftovers import play
from tests.sim.world import FAULT_KINDS, Knobs, Outcome, sized

# Runs a shrink may spend (a world is a few hundredths of a second of one core).
BUDGET = 80


def failing(outcome: Outcome) -> bool:
    return bool(outcome.violations)


def _cuts(knobs: Knobs) -> Iterator[Knobs]:
    """Each one-step smaller world than `knobs`, the biggest cuts first."""
    for name in ("agents", "steps", "replicas"):
        if getattr(knobs, name) > 1:
            yield dataclasses.replace(knobs, **{name: getattr(knobs, name) - 1})
    for kind in FAULT_KINDS:
        if kind not in knobs.off:
            yield dataclasses.replace(knobs, off=knobs.off | {kind})


class NotFailingAlone(ValueError):
    """The seed does not fail when it runs alone (it failed after other seeds in one process)."""


def shrink(
    seed: int, knobs: Knobs | None = None, fails: Callable[[Outcome], bool] = failing, budget: int = BUDGET
) -> tuple[Knobs, Outcome]:
    """The smallest knobs found (and their outcome) with which `seed` still `fails`; greedy, in
    passes over every cut, within `budget` runs."""
    knobs = sized(seed, knobs or Knobs())  # the seed's own size, cut from there
    best = play(seed, knobs)  # as `run.run` plays it
    if not fails(best):
        raise NotFailingAlone(f"seed {seed} does not fail with {knobs}: nothing to shrink")
    runs, cut = 1, True
    while cut and runs < budget:
        cut = False
        for smaller in _cuts(knobs):
            if runs >= budget:
                break
            runs += 1
            outcome = play(seed, smaller)
            if fails(outcome):
                knobs, best, cut = smaller, outcome, True
    return knobs, best


def command(seed: int, knobs: Knobs) -> str:
    """The one command that replays `seed` with `knobs` (agents and steps given when the knobs
    name them, as a shrunk world's do)."""
    words = ["python -m tests.sim.run --seeds 1", f"--seed {seed}"]
    default = Knobs()
    for name in ("replicas", "agents", "steps"):
        if getattr(knobs, name) != getattr(default, name):
            words.append(f"--{name} {getattr(knobs, name)}")
    if knobs.off:
        words.append(f"--off {','.join(k for k in FAULT_KINDS if k in knobs.off)}")
    return " ".join(words)
