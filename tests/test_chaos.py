"""The chaos harness in CI: a few seeds of every scenario at every study level, three methods.

effectgate must show no duplicate effect and no false success anywhere, and settle every episode
(every scenario's provider has a read API); the direct method must show duplicates at the high
level, or the harness would be unable to fail. A second run kill -9s the gateway mid-flight.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from effectgate.chaos.model import Result
from effectgate.chaos.progress import Progress
from effectgate.chaos.report import markdown, summarize
from effectgate.chaos.runner import Options, run_matrix
from effectgate.chaos.scenarios import SCENARIOS

SEEDS = 6


async def run(options: Options) -> list[Result]:
    cells = len(options.levels) * len(options.scenarios) * len(options.methods)
    return await run_matrix(options, Progress(cells * options.seeds, stream=io.StringIO()))


def rows(results: Sequence[Result], method: str) -> list[dict[str, object]]:
    return [r for r in summarize(results, ("method", "level", "scenario")) if r["method"] == method]


def assert_effectgate_exact(results: Sequence[Result]) -> None:
    table = markdown(summarize(results, ("method", "level", "scenario")), ("method", "level", "scenario"))
    cells = rows(results, "effectgate")
    assert cells, table
    for cell in cells:
        where = f"{cell['level']} {cell['scenario']}\n{table}"
        assert cell["duplicates"] == 0, where
        assert cell["false_successes"] == 0, where
        assert cell["unknown_after"] == 0, where
        assert cell["success"] == cell["episodes"], where
    for r in results:
        if r.method == "effectgate":
            assert r.truth.effects == 1, (r.episode, r.notes)


@pytest.mark.timeout(120)
async def test_three_methods_at_every_level() -> None:
    results = await run(Options(seeds=SEEDS))
    assert len(results) == SEEDS * 3 * len(SCENARIOS) * 3
    assert_effectgate_exact(results)
    direct_high = [r for r in rows(results, "direct") if r["level"] == "high"]
    assert sum(int(str(r["duplicates"])) for r in direct_high) > 0, "the direct method never duplicated"


@pytest.mark.timeout(120)
async def test_effectgate_survives_kill_minus_nine() -> None:
    results = await run(Options(seeds=4, levels=("high",), methods=("effectgate",), crash=True))
    assert_effectgate_exact(results)
