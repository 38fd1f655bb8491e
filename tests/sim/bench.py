"""`python -m tests.sim.bench` (`make sim-bench`): the simulator's speed, two shapes of world side
by side in one process, on one core, in CPU seconds (machines here are shared: wall time would
measure the neighbours).

- `budget`: the worlds `make sim` and `make test` run (agents and steps drawn from each seed, two
  replicas and a third in one seed in five; about 85 events a seed).
- `target`: the smallest world the speed target names: exactly two replicas, two agents of two
  steps each (every other part of a world as in the budget: operators, webhooks, reloads, the MCP
  upstream, faults, crashes, the settling phase), which makes at least 50 events a seed.

The rounds alternate (`budget`, `target`, `budget`, …) over the same seeds, so a neighbour's load
falls on both. Prints one line a shape, their ratio, and the target's verdict: at least 3,000
seeds a minute with at least 50 events a seed."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.sim import run
from tests.sim.world import Knobs

SHAPES = {
    "budget": Knobs(),
    "target": Knobs(replicas=2, third_replica=0.0, agents=2, steps=2),
}
TARGET_RATE, TARGET_EVENTS = 3000.0, 50.0


@dataclass
class Tally:
    seeds: int = 0
    cpu: float = 0.0
    counts: Counter[str] = field(default_factory=Counter)
    violations: int = 0

    @property
    def per_minute(self) -> float:
        return self.seeds / self.cpu * 60 if self.cpu else 0.0

    @property
    def events_a_seed(self) -> float:
        return self.counts["events"] / self.seeds if self.seeds else 0.0


def measure(seeds: int, first: int, rounds: int) -> dict[str, Tally]:
    tallies = {name: Tally() for name in SHAPES}
    for round_ in range(rounds):
        start = first + round_ * seeds
        for name, knobs in SHAPES.items():
            began = time.process_time()
            outcomes, _ = run.run(seeds, start, knobs)
            tally = tallies[name]
            tally.cpu += time.process_time() - began
            tally.seeds += len(outcomes)
            for outcome in outcomes:
                tally.counts.update(outcome.counts)
                tally.violations += len(outcome.violations)
    return tallies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=250, help="seeds a round and shape")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    tallies = measure(args.seeds, args.seed, args.rounds)
    for name, t in tallies.items():
        print(
            f"{name}: {t.seeds} seeds, {t.events_a_seed:.1f} events a seed, cpu {t.cpu:.1f}s,"
            f" {t.per_minute:.0f} seeds/min, {t.counts['events'] / t.cpu if t.cpu else 0:.0f} events/s,"
            f" {t.violations} violations"
        )
    budget, target = tallies["budget"], tallies["target"]
    ratio = target.per_minute / budget.per_minute if budget.per_minute else 0.0
    print(f"ratio target/budget: {ratio:.2f} (seeds a minute)")
    met = target.per_minute >= TARGET_RATE and target.events_a_seed >= TARGET_EVENTS
    print(
        f"target (>= {TARGET_RATE:.0f} seeds/min, >= {TARGET_EVENTS:.0f} events a seed, two replicas):"
        f" {'met' if met else 'not met'} at {target.per_minute:.0f} seeds/min, {target.events_a_seed:.1f} events a seed"
    )
    return 1 if budget.violations or target.violations else 0


if __name__ == "__main__":
    sys.exit(main())
