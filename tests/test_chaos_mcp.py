"""The chaos harness's `mcp` provider: the study's setting replayed through an MCP upstream without
keys (the lab's tracker, over streamable HTTP), counted at the upstream's own ledger.

Each test runs real episodes: a tracker MCP server per episode in this process, the direct agents
calling it over MCP with the `mcp` SDK's client, effectgate an `effectgate serve` child reaching it
through its `mcp` adapter.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from effectgate_lab.chaos.mcp_scenario import MCP_FAULTS, MappedFaults, McpCreateIssue, McpProvider
from effectgate_lab.chaos.model import ENGINES, METHODS, Result, Told
from effectgate_lab.chaos.progress import Progress
from effectgate_lab.chaos.runner import GATEWAY, Options, Part, optional_parts, run_matrix
from effectgate_lab.simulators.faults import STUDY_LEVELS, Fault, FaultInjector, FaultPlan

TASK = (McpCreateIssue.name,)


async def run(options: Options) -> list[Result]:
    total = sum(p.seeds * len(p.levels) * len(p.scenarios) * len(p.behaviours) for p in options.parts)
    return await run_matrix(options, Progress(total * len(options.methods), stream=io.StringIO()))


def one_effect_each(results: Sequence[Result]) -> None:
    """effectgate's claim at the upstream's ledger: at most one issue per logical action, exactly
    one when the agent was told success, never a success without the whole issue."""
    mine = [r for r in results if r.method == "effectgate"]
    assert mine
    for r in mine:
        where = (r.episode, r.truth, r.told_final, r.notes)
        assert r.truth.effects <= 1, where
        assert not r.false_success, where
        if r.told_final is Told.SUCCESS:
            assert r.whole_once, where


def test_the_study_faults_map_onto_the_upstream_simulator() -> None:
    injector = FaultInjector(FaultPlan(seed=1))
    mapped = MappedFaults(injector)
    study = [
        Fault.DROP_AFTER_COMMIT,
        Fault.DROP_DELAYED,
        Fault.DELAYED_VISIBILITY,
        Fault.PARTIAL,
        Fault.CONFLICT,
        Fault.DROP_BEFORE_COMMIT,
        None,
    ]
    injector.script(study)
    names = [mapped.next() for _ in study]
    assert names == [
        "drop_after_commit",
        "drop_after_commit",
        "delayed_visibility",
        "partial",
        "error_no_effect",
        "restart",
        None,
    ]
    assert injector.decisions == study  # the harness's own record of each write's fault
    # Every fault the study's levels draw has an upstream counterpart; a 500 after the effect has none.
    assert {f for level in STUDY_LEVELS.values() for f in level} <= set(MCP_FAULTS)
    with pytest.raises(ValueError, match="error_after_commit"):
        McpProvider(FaultPlan(error_after_commit=0.1), 0.3)
    injector.script([Fault.ERROR_AFTER_COMMIT])
    with pytest.raises(ValueError, match="error_after_commit"):
        mapped.next()


@pytest.mark.timeout(300)
async def test_a_lost_answer_and_a_lost_request_through_an_mcp_upstream() -> None:
    """The first write of every episode loses its answer after the issue was created, or the
    server goes away with the request (a restart, nothing created): effectgate reads `list_issues`
    and ends with one issue either way; the baseline, re-planning, creates a second one."""
    parts = (
        Part("mcp_lost_answer", ("low",), TASK, seeds=3, first_fault=Fault.DROP_AFTER_COMMIT.value),
        Part("mcp_restart", ("low",), TASK, seeds=3, first_fault=Fault.DROP_BEFORE_COMMIT.value, methods=GATEWAY),
    )
    results = await run(Options(parts=parts, methods=("baseline", "effectgate"), parallel=3))
    assert len(results) == 3 * 2 + 3
    one_effect_each(results)
    first = {p.name: p.first_fault for p in parts}
    for r in (r for r in results if r.method == "effectgate"):
        assert r.told_final is Told.SUCCESS and r.whole_once, (r.episode, r.truth, r.notes)
        assert r.first_fault == first[r.episode.part]
    baseline = [r for r in results if r.method == "baseline"]
    assert len(baseline) == 3 and all(r.duplicate for r in baseline), [(r.truth, r.notes) for r in baseline]


@pytest.mark.timeout(300)
async def test_the_mcp_part_at_the_high_level_one_issue_per_action() -> None:
    """The optional `mcp` part, small: the study's high level on every write, all six methods."""
    (mcp,) = optional_parts(2)
    assert mcp.name == "mcp" and mcp.scenarios == TASK
    # The engines have a small cell each in tests/test_chaos_peers.py (their workers are heavier).
    methods = tuple(m for m in METHODS if m not in ENGINES)
    results = await run(Options(parts=(Part("mcp", ("high",), TASK, seeds=4),), methods=methods, parallel=3))
    assert {r.method for r in results} == {
        "baseline",
        "retries_only",
        "idempotency_only",
        "wrapper",
        "stable_key",
        "effectgate",
    }
    one_effect_each(results)
