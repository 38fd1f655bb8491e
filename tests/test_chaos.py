"""The chaos harness in CI: a small run of every method, the statistics, the recorded-run format,
and the docs' tables against the committed run (docs/chaos-run.json).

The small run asserts only what holds on every run however loaded the machine is: effectgate
makes no duplicate and no false success (its window here is 3x the lag, far from the edge the
sweep explores), and the baseline duplicates when the run is resumed, or the harness could not
fail at all.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from effectgate_lab.chaos.cli import block, violations
from effectgate_lab.chaos.model import ENGINES, LEVELS, METHODS, Result, Truth
from effectgate_lab.chaos.progress import Progress
from effectgate_lab.chaos.reporting import docs_blocks
from effectgate_lab.chaos.reporting.record import document, load, results_of, save
from effectgate_lab.chaos.reporting.report import summarize
from effectgate_lab.chaos.reporting.stats import mcnemar_exact, percentile, wilson
from effectgate_lab.chaos.reporting.tables import TABLES
from effectgate_lab.chaos.runner import (
    BEHAVIOUR_TASKS,
    CRM,
    GATEWAY,
    Options,
    Part,
    all_parts,
    default_parts,
    run_matrix,
)
from effectgate_lab.simulators.crm_sim import CrmSimulator
from effectgate_lab.simulators.faults import FaultPlan

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"": ROOT / "docs" / "chaos-run.json", "crash_": ROOT / "docs" / "chaos-crash-run.json"}
ROW_FIELDS = {
    "level",
    "scenario",
    "behaviour",
    "method",
    "episodes",
    "duplicates",
    "duplicates_ci95",
    "success_at_fault_stop",
    "success_final",
    "false_success",
    "false_failure",
    "unknown_final",
    "time_to_definite_p99_s",
}


async def run(options: Options) -> list[Result]:
    total = sum(p.seeds * len(p.levels) * len(p.scenarios) * len(p.behaviours) for p in options.parts)
    return await run_matrix(options, Progress(total * len(options.methods), stream=io.StringIO()))


def assert_effectgate_exact(results: Sequence[Result]) -> None:
    mine = [r for r in results if r.method == "effectgate"]
    assert mine
    for r in mine:
        where = (r.episode, r.truth, r.told_final, r.notes)
        assert not r.duplicate, where
        assert not r.false_success, where


# -- statistics ------------------------------------------------------------------------------


def test_wilson_matches_published_values() -> None:
    # Reference values: Wilson score interval, z = 1.96 (e.g. statsmodels proportion_confint).
    for (k, n), (low, high) in {
        (0, 10): (0.0, 0.2775),
        (5, 10): (0.2366, 0.7634),
        (10, 10): (0.7225, 1.0),
        (0, 50): (0.0, 0.0713),
        (13, 50): (0.1587, 0.3955),
    }.items():
        lo, hi = wilson(k, n)
        assert math.isclose(lo, low, abs_tol=1e-4) and math.isclose(hi, high, abs_tol=1e-4), (k, n, lo, hi)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_exact_paired_test_and_percentile() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert mcnemar_exact(1, 9) == pytest.approx(0.021484375)
    assert mcnemar_exact(4, 4) == 1.0
    assert percentile([3.0, 1.0, 2.0, math.inf], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, math.inf], 99) == math.inf
    assert percentile([], 99) == 0.0


async def test_a_timeout_before_commit_applies_nothing() -> None:
    sim = CrmSimulator(api_key="k", faults=FaultPlan(seed=1))
    sim.injector.script(["drop_before_commit", "drop_after_commit"])
    url = await sim.start()
    try:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer k"}) as http:
            for _ in range(2):
                with pytest.raises(httpx.HTTPError):
                    await http.post("/customers/cus_1/activate")
            assert (await http.post("/customers/cus_1/activate")).status_code == 200
    finally:
        await sim.stop()
    # The request lost before commit left nothing; the response lost after commit left an effect.
    assert [e["fault"] for e in sim.ledger] == ["drop_after_commit", None]


# -- a small run -----------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_every_method_small_run_and_recorded_format(tmp_path: Path) -> None:
    parts = (
        Part("headline", LEVELS, CRM, seeds=3, margins=(3.0,)),
        Part(
            "behaviours", ("low",), ("activate_customer", "charge_card"), ("single", "resume"), seeds=3, margins=(3.0,)
        ),
    )
    # The engines have a small cell each in tests/test_chaos_peers.py (their workers are heavier).
    methods = tuple(m for m in METHODS if m not in ENGINES)
    results = await run(Options(parts=parts, methods=methods, parallel=6))
    assert len(results) == (3 * 3 * 2 + 3 * 2 * 2) * len(methods)
    assert_effectgate_exact(results)
    resumed = [r for r in results if r.method == "baseline" and r.episode.behaviour == "resume"]
    assert any(r.duplicate for r in resumed), "the baseline never duplicated a resumed step"

    # The recorded run: rows with the promised fields, episodes that render the same rows again.
    doc = document(results, {"lag_s": 0.3, "margin": 3.0, "parallel": 6, "cores": 2, "load_average": [0, 0, 0]})
    path = tmp_path / "run.json"
    save(doc, path)
    again = load(path)
    assert again == json.loads(json.dumps(doc))
    assert {r["method"] for r in again["rows"]} == set(methods)
    for row in again["rows"]:
        assert set(row) >= ROW_FIELDS, ROW_FIELDS - set(row)
        low, high = row["duplicates_ci95"]
        assert 0 <= low <= row["duplicates"] / row["episodes"] <= high <= 1
    assert summarize(results_of(again), lag=0.3) == again["rows"]
    for name, render in TABLES.items():
        text = render(results_of(again))
        assert text.startswith("| ") or (name == "engines" and not text), name  # engines: test_chaos_peers
    cells = [[c.strip() for c in line.split("|")[1:4]] for line in TABLES["headline"](results).splitlines()]
    assert ["high", "record_invoice", "effectgate"] in cells


@pytest.mark.timeout(180)
async def test_effectgate_survives_kill_minus_nine_with_faults_always_on(own_tmpdir: Path) -> None:
    parts = (Part("headline", ("high",), CRM, seeds=4, margins=(3.0,)),)
    results = await run(Options(parts=parts, methods=("effectgate",), crash=True))
    assert not os.listdir(own_tmpdir)  # the cell's directory (store, socket, config) is gone
    assert_effectgate_exact(results)
    assert sum(r.effects_faults_off for r in results) == 0  # every write met the faults


# -- the settings that close the edges: unique = "scope", consistency_window = "auto" ------------


@pytest.mark.timeout(240)
async def test_unique_scope_makes_subagents_with_their_own_step_ids_one_action() -> None:
    """Two subagents given their own step ids are two actions for effectgate by default (the
    behaviours cell, kept to show it), one with `unique = "scope"` on the tool: one effect."""
    diff = ("subagents_diff_step",)
    parts = (
        Part("behaviours", ("medium",), BEHAVIOUR_TASKS, diff, seeds=3, methods=GATEWAY),
        Part("unique_scope", ("medium",), BEHAVIOUR_TASKS, diff, seeds=3, unique=True, methods=GATEWAY),
    )
    options = Options(parts=parts, methods=GATEWAY, parallel=4)
    results = await run(options)
    unique = [r for r in results if r.episode.part == "unique_scope"]
    assert len(unique) == 6
    assert_effectgate_exact(unique)
    assert all(r.truth.effects <= 1 for r in unique), [(r.episode, r.truth) for r in unique]
    # Stripe charges twice for two keys: without the setting the two subagents are two charges.
    plain = [r for r in results if r.episode.part == "behaviours" and r.episode.scenario == "charge_card"]
    assert any(r.duplicate for r in plain), "two step ids never made two actions: the contrast is gone"
    # --check knows which cell breaks on purpose and which must not.
    assert violations(results, options) == []
    assert violations([replace(unique[0], truth=Truth(2, 2))], options), "a duplicate under unique=scope passed"


@pytest.mark.timeout(300)
async def test_a_learned_window_holds_where_a_window_below_the_lag_does_not() -> None:
    """The sweep's ratio below the lag with `consistency_window = "auto"`: the configured 0.5 x lag
    is only the declared window until the warm-up has taught the gateway the provider's lags."""
    part = Part("sweep_auto", ("high",), CRM, seeds=3, margins=(0.5,), window="auto", methods=GATEWAY)
    options = Options(parts=(part,), methods=GATEWAY, parallel=2)
    results = await run(options)
    assert len(results) == 6
    assert_effectgate_exact(results)
    notes = [n for r in results for n in r.notes if n.startswith("window auto:")]
    assert len(notes) == 6, [r.notes for r in results]  # every cell learned its window
    assert violations(results, options) == []
    short = Part("sweep", ("high",), CRM, margins=(0.5,))
    assert short.expected_to_break("single", 0.5) and not part.expected_to_break("single", 0.5)


def test_the_default_run_records_the_settings_cells() -> None:
    parts = {p.name: p for p in default_parts(50)}
    assert parts["unique_scope"].unique and "subagents_diff_step" in parts["unique_scope"].behaviours
    assert parts["sweep_auto"].window == "auto" and min(parts["sweep_auto"].margins) < 1
    # Both on the fault streams of the cells they answer (same level, tasks and seeds).
    assert parts["unique_scope"].levels == parts["behaviours"].levels
    assert parts["unique_scope"].seeds == parts["behaviours"].seeds
    assert (parts["sweep_auto"].levels, parts["sweep_auto"].scenarios) == (
        parts["sweep"].levels,
        parts["sweep"].scenarios,
    )


# -- the docs cannot drift from the committed run --------------------------------------------


@pytest.mark.parametrize("prefix", list(RUNS))
def test_docs_tables_are_the_committed_run(prefix: str) -> None:
    doc = load(RUNS[prefix])
    assert doc["meta"]["crash"] is bool(prefix)
    if not prefix:
        assert {r["method"] for r in doc["rows"]} == set(METHODS)
    run = RUNS[prefix].relative_to(ROOT)
    for name in ("docs/chaos.md", "README.md"):
        text = (ROOT / name).read_text()
        found = docs_blocks.blocks(text, prefix)
        assert found or prefix, f"{name} embeds no chaos table"
        for block_name, body in found.items():
            assert body == block(doc, block_name), (
                f"{name}: block {prefix}{block_name} differs from `effectgate chaos report {run}`; regenerate "
                f"with `effectgate chaos report {run} --write docs/chaos.md README.md --prefix '{prefix}'`"
            )


def test_the_readme_first_screen_states_the_committed_run() -> None:
    """The README's first screen carries the run's figures for effectgate as shipped and its limits
    (rendered from the committed run: the block test above keeps the text equal to the run), and
    the figures it calls "as shipped" leave out exactly the cells that show a limit on purpose."""
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:40])
    assert "<!-- chaos:readme -->" in first_screen and "**Its limits:**" in first_screen
    doc = load(RUNS[""])
    text = block(doc, "readme")
    mine = [r for r in results_of(doc) if r.method == "effectgate"]
    parts = {p.name: p for p in all_parts()}
    shipped = [r for r in mine if not parts[r.episode.part].expected_to_break(r.episode.behaviour, r.episode.margin)]
    assert 0 < len(shipped) < len(mine)
    dups = sum(r.duplicate for r in shipped)
    assert f"**duplicates {dups} of {len(shipped)} [" in text
    assert f"**false successes {sum(r.false_success for r in shipped)} of {len(shipped)} [" in text
