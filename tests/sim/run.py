"""`python -m tests.sim.run --seeds N --seed S`: N simulated worlds from seed S.

Prints each failing seed's trace and the command that replays it, then one last line:
`sim: N seeds, E events, V violations, digest HEX`, the digest over every seed's trace in order
(the same arguments always print the same digest)."""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from collections import Counter

import effectgate.gateway
from tests.sim import shrink
from tests.sim.leftovers import played
from tests.sim.world import FAULT_KINDS, Knobs, Outcome

# What `make test` (tests/sim/test_sim.py) and a bare `make sim` run.
SEEDS, SEED = 2000, 1


def run(seeds: int, first: int, knobs: Knobs | None = None, *, stop: bool = False) -> tuple[list[Outcome], str]:
    """The outcomes of seeds first.. first+seeds-1 (up to the first failing one with `stop`), and
    the digest over their traces in order."""
    outcomes = []
    digest = hashlib.sha256()
    disabled = logging.root.manager.disable  # the gateway's logs, off for every world (World.run)
    logging.disable(logging.CRITICAL)
    try:
        with played() as play:
            for seed in range(first, first + seeds):
                outcome = play(seed, knobs)  # what a world leaves unread is reported on its seed
                digest.update(outcome.digest.encode())
                outcomes.append(outcome)
                if stop and outcome.violations:
                    break
    finally:
        logging.disable(disabled)
    return outcomes, digest.hexdigest()


def replay_command(seed: int) -> str:
    return f"make sim SEEDS=1 SEED={seed}"


def report(outcome: Outcome, replay: str | None = None) -> None:
    """A failing seed's trace, what it violated, and the one command that replays it."""
    print(f"seed {outcome.seed}: {len(outcome.violations)} violation(s)")
    for line in outcome.trace:
        print(f"  {line}")
    for violation in outcome.violations:
        print(f"  violated: {violation}")
    print(f"  replay: {replay or replay_command(outcome.seed)}")


def report_shrunk(outcome: Outcome, knobs: Knobs, first: int) -> None:
    """The failing seed shrunk (`shrink.py`): its shorter trace and the command that replays it.
    A seed that fails only after the seeds before it in one process is said to be so, with the
    command that runs it after them: that dependence is itself a defect (state kept across worlds)."""
    try:
        smaller, shrunk = shrink.shrink(outcome.seed, knobs)
    except shrink.NotFailingAlone:
        seeds = outcome.seed - first + 1
        if knobs == Knobs():
            replay = f"make sim SEEDS={seeds} SEED={first}"
        else:
            replay = shrink.command(first, knobs).replace("--seeds 1 ", f"--seeds {seeds} ", 1)
        print(
            f"shrunk: seed {outcome.seed} does not fail alone, only after the seeds before it in this"
            f" process: something outlived its world (a defect of its own); replay: {replay}"
        )
        return
    print(f"shrunk: seed {outcome.seed} fails with {len(shrunk.trace)} events (of {len(outcome.trace)}): {smaller}")
    for line in shrunk.trace:
        print(f"    {line}")
    for violation in shrunk.violations:
        print(f"    violated (shrunk): {violation}")
    print(f"    replay (shrunk): {shrink.command(outcome.seed, smaller)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--trace", action="store_true", help="print every seed's trace")
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--no-shrink", action="store_true", help="do not shrink the first failing seed")
    parser.add_argument("--replicas", type=int, default=Knobs.replicas)
    parser.add_argument("--agents", type=int, default=Knobs.agents, help="agents (default: drawn from each seed)")
    parser.add_argument("--steps", type=int, default=Knobs.steps, help="steps an agent (default: drawn from each seed)")
    parser.add_argument(
        "--beyond-window",
        type=float,
        default=0.0,
        help="each read's chance of a lag past the declared window (the documented limit, counted apart)",
    )
    parser.add_argument("--off", default="", help=f"fault kinds switched off, comma-separated: {','.join(FAULT_KINDS)}")
    parser.add_argument("--mutant-check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    off = frozenset(k for k in args.off.split(",") if k)
    knobs = Knobs(
        replicas=args.replicas, agents=args.agents, steps=args.steps, off=off, beyond_window=args.beyond_window
    )
    if args.mutant_check and "effectgate-mutant-" not in str(effectgate.gateway.__file__):
        print(f"mutated effectgate not loaded: {effectgate.gateway.__file__}")
        return 2
    started = time.process_time()
    outcomes, digest = run(args.seeds, args.seed, knobs, stop=args.stop)
    counts: Counter[str] = Counter()
    failed = 0
    for outcome in outcomes:
        counts.update(outcome.counts)
        if outcome.violations or args.trace or args.seeds == 1:
            report(outcome, shrink.command(outcome.seed, knobs) if knobs != Knobs() else None)
        failed += bool(outcome.violations)
    spent = time.process_time() - started
    first = next((o for o in outcomes if o.violations), None)
    if first is not None and not args.no_shrink:
        report_shrunk(first, knobs, args.seed)  # after the timing: shrinking is not the seeds' cost
    faults = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "events")
    print(f"faults: {faults}")
    rate = (len(outcomes) / spent * 60, counts["events"] / spent) if spent else (0.0, 0.0)
    print(f"cpu: {spent:.1f}s, {rate[0]:.0f} seeds/min, {rate[1]:.0f} events/s, {failed} failing seed(s)")
    violations = sum(len(o.violations) for o in outcomes)
    print(f"sim: {len(outcomes)} seeds, {counts['events']} events, {violations} violations, digest {digest}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
