"""`make sim-bench` works: both shapes run the same seeds and the verdict names the target. (Its
figures are read from `make sim-bench`, never asserted here.)"""

from __future__ import annotations

import re

import pytest

from tests.sim import bench
from tests.sim.world import Knobs


def test_the_bench_runs_both_shapes_over_the_same_seeds_and_says_whether_the_target_holds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--seeds", "3", "--rounds", "2", "--seed", "11"]) == 0
    out = capsys.readouterr().out.splitlines()
    for name in ("budget", "target"):
        (line,) = [o for o in out if o.startswith(f"{name}: ")]
        assert re.match(
            rf"{name}: 6 seeds, [\d.]+ events a seed, cpu [\d.]+s, \d+ seeds/min, \d+ events/s, 0 violations", line
        )
    assert any(o.startswith("ratio target/budget: ") for o in out)
    assert re.match(r"target \(>= 3000 seeds/min, >= 50 events a seed, two replicas\): (met|not met) at \d+", out[-1])


def test_the_target_shape_is_two_replicas_of_two_agents_of_two_steps() -> None:
    target = bench.SHAPES["target"]
    assert (target.replicas, target.third_replica, target.agents, target.steps) == (2, 0.0, 2, 2)
    assert bench.SHAPES["budget"] == Knobs()  # what `make sim` and `make test` run
