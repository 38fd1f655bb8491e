"""The engines teams pick instead (Restate, DBOS on SQLite and on PostgreSQL) in the chaos
harness: one small cell each, so the comparison cannot rot.

What is asserted holds on any machine, because every episode's faults come from its seeded
stream: at the provider that honours idempotency keys the engine's step key holds (one charge);
at the CRM, whose first write is applied and its answer lost, the engine's retry of its step
applies it again (the duplicate the docs' tables count). With --crash the worker dies after a
provider answered and before the step was recorded, and the engine runs the step again. With
two approvals raced, each engine waits for the person with its own primitive (a Restate
awakeable, DBOS `recv`): the handler or workflow asks, both clicks are delivered, one charge.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from effectgate_lab.chaos.model import ENGINES, FAMILIES, KEYED, Episode, Result, Told, Truth
from effectgate_lab.chaos.peers.throwaway_pg import DSN_ENV
from effectgate_lab.chaos.progress import Progress
from effectgate_lab.chaos.reporting.engines import engines
from effectgate_lab.chaos.runner import Options, Part, at_least, default_parts, run_matrix
from effectgate_lab.simulators.faults import Fault

SEEDS = 2
PARTS = (
    Part("keyed", ("low",), ("charge_card",), seeds=SEEDS),
    Part("timeout_after_commit", ("low",), ("record_invoice",), seeds=SEEDS, first_fault=Fault.DROP_AFTER_COMMIT.value),
    Part("behaviours", ("low",), ("charge_card",), ("approval_twice",), seeds=SEEDS),
)


async def run(options: Options) -> list[Result]:
    total = sum(p.seeds * len(p.levels) * len(p.scenarios) * len(p.behaviours) for p in options.parts)
    total *= len(options.methods)
    return await run_matrix(options, Progress(total, stream=io.StringIO()))


def by_part(results: Sequence[Result], name: str) -> list[Result]:
    return [r for r in results if r.episode.part == name]


@pytest.fixture
def peers_pg(pg_admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DBOS on PostgreSQL uses the session's throw-away cluster (a fresh database per cell)."""
    monkeypatch.setenv(DSN_ENV, pg_admin_dsn)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("engine", ENGINES)
async def test_an_engine_holds_with_keys_and_duplicates_without(engine: str, peers_pg: None, own_tmpdir: Path) -> None:
    results = await run(Options(parts=PARTS, methods=(engine,), parallel=len(PARTS)))
    # Each cell's directory (the worker's log, DBOS's SQLite file, Restate's server) is gone.
    assert not os.listdir(own_tmpdir), os.listdir(own_tmpdir)
    assert len(results) == 3 * SEEDS
    for r in by_part(results, "keyed"):
        where = (r.episode, r.truth, r.told_final, r.notes)
        assert r.truth.effects == 1 and r.told_final is Told.SUCCESS, where
    for r in by_part(results, "timeout_after_commit"):
        where = (r.episode, r.truth, r.told_final, r.notes)
        assert r.first_fault == Fault.DROP_AFTER_COMMIT.value, where
        assert r.duplicate, where  # the step's retry wrote again: the CRM has no key to dedup on
    for r in by_part(results, "behaviours"):
        where = (r.episode, r.truth, r.told_final, r.notes)
        # The engine asked for approval and waited (no click is delivered before it asks); both
        # clicks reached it; it charged once.
        assert "approval: 2 of 2 clicks delivered" in r.notes, where
        assert r.truth.effects == 1 and r.told_final is Told.SUCCESS, where


@pytest.mark.timeout(600)
async def test_a_worker_killed_after_the_effect_runs_the_step_again(own_tmpdir: Path) -> None:
    """DBOS's recovery at launch re-runs a step the dead worker never recorded, with the same
    key: the CRM applies it again (Stripe would not: the key test above). Each episode's budget
    is long: two suites side by side made a DBOS worker's relaunch outlast the default 30 s, and
    an episode cut short shows no duplicate."""
    part = Part("headline", ("low",), ("activate_customer",), seeds=SEEDS)
    options = Options(parts=(part,), methods=("dbos_sqlite",), crash=True, parallel=1, budget=120.0)
    results = await run(options)
    assert not os.listdir(own_tmpdir), os.listdir(own_tmpdir)
    assert len(results) == SEEDS
    assert any("worker died" in n for r in results for n in r.notes), [r.notes for r in results]
    assert any(r.duplicate for r in results), [(r.truth, r.notes) for r in results]


def test_the_engines_table_splits_providers_with_and_without_keys() -> None:
    """The docs' engines table: one row per fault family, provider kind and method, from rows
    made here (the table's arithmetic, not a run)."""

    def result(method: str, part: str, scenario: str, effects: int) -> Result:
        episode = Episode.draw(part, 0, "high", scenario, "single", 1.5)
        return Result(method, episode, told_final=Told.SUCCESS, truth=Truth(effects, effects))

    rows = [
        result("dbos_sqlite", "keyed", "charge_card", 1),
        result("dbos_sqlite", "headline", "record_invoice", 2),
        result("effectgate", "headline", "record_invoice", 1),
    ]
    text = engines(rows).splitlines()
    assert "| study faults (no keys)" in text[3] and "dbos_sqlite" in text[3] and "1/1 = 100%" in text[3]
    assert "| study faults (keys)" in text[2] and "0/1 = 0%" in text[2]
    assert "effectgate" in text[4] and "0/1" in text[4]
    assert engines(rows[2:]) == ""  # no engine in the run: no table


def test_every_fault_family_gets_the_episodes_asked_for() -> None:
    """`--family-episodes` (runner.at_least): each family of the engines' table reaches the floor
    per method with keys and without, by more seeds for its parts; effectgate's settings parts and
    a floor already met are left alone."""
    parts = default_parts(70)
    raised = at_least(parts, 200)
    episodes: dict[tuple[str, bool], int] = {}
    for p in raised:
        if p.name in FAMILIES:
            for scenario in p.scenarios:
                kind = (FAMILIES[p.name], scenario in KEYED)
                episodes[kind] = episodes.get(kind, 0) + p.seeds * len(p.levels) * len(p.behaviours) * len(p.margins)
    assert min(episodes.values()) >= 200, episodes
    assert episodes[("first write's request lost", False)] == 200  # 2 tasks x 100 seeds, no more
    before = {p.name: p.seeds for p in parts}
    assert {p.name: p.seeds for p in raised if p.methods} == {p.name: before[p.name] for p in parts if p.methods}
    assert at_least(parts, 0) == parts
    assert all(p.seeds >= before[p.name] for p in raised)
