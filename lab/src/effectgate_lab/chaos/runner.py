"""Runs the parts of a run: cells of part x method x level x scenario x behaviour x margin, each
with one episode per seed.

Every episode has a simulator of its own whose faults come from the stream of its (scenario,
level, seed), so the i-th write of an episode meets the same fault under every method and every
behaviour, and streams are independent across scenarios, levels and seeds. An episode:

1. the agents act while the faults are on; the answer they give is "the answer at fault stop";
2. the episode's faults stop (never with --crash: then every later write meets faults too);
3. every method runs its own read path once more (reconcile); only effectgate has a reconciler,
   the wrapper and stable_key re-read their postcondition, the others have nothing to run;
4. once every lag has passed, the simulator's ledger says how many effects the request made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

import httpx

from effectgate_lab.chaos.agent import run_agents
from effectgate_lab.chaos.mcp_scenario import McpCreateIssue
from effectgate_lab.chaos.methods.direct import Baseline, RetriesOnly
from effectgate_lab.chaos.methods.engines import DbosPostgres, DbosSqlite, RestateMethod
from effectgate_lab.chaos.methods.method import Method, Run
from effectgate_lab.chaos.methods.stable_key import StableKey
from effectgate_lab.chaos.methods.via_gateway import ViaGateway
from effectgate_lab.chaos.methods.wrapper import IdempotencyOnly, Wrapper
from effectgate_lab.chaos.model import (
    BEHAVIOURS,
    DEFAULT_LAG,
    FAMILIES,
    HTTP_TIMEOUT,
    KEYED,
    LEVELS,
    MARGIN,
    METHODS,
    Episode,
    Result,
    Told,
)
from effectgate_lab.chaos.progress import Progress
from effectgate_lab.chaos.scenarios import SCENARIOS, Scenario
from effectgate_lab.labkit.workdir import temporary_workdir
from effectgate_lab.simulators.faults import STUDY_LEVELS, Fault, FaultPlan

EPISODE_BUDGET = 30.0  # seconds for the agents of one episode, and again for settling it
METHOD_TYPES: dict[str, Callable[[], Method]] = {
    "baseline": Baseline,
    "retries_only": RetriesOnly,
    "idempotency_only": IdempotencyOnly,
    "wrapper": Wrapper,
    "stable_key": StableKey,
    "restate": RestateMethod,
    "dbos_sqlite": DbosSqlite,
    "dbos_postgres": DbosPostgres,
    "effectgate": ViaGateway,
}
CRM = ("activate_customer", "record_invoice")
TASKS: dict[str, Scenario] = {**SCENARIOS, McpCreateIssue.name: McpCreateIssue()}
BEHAVIOUR_TASKS = ("activate_customer", "charge_card")
UNIQUE_BEHAVIOURS = ("single", "subagents_same_step", "subagents_diff_step")
GATEWAY = ("effectgate",)


@dataclass(frozen=True)
class Part:
    """One table's worth of episodes."""

    name: str
    levels: tuple[str, ...]
    scenarios: tuple[str, ...]
    behaviours: tuple[str, ...] = ("single",)
    seeds: int = 25
    margins: tuple[float, ...] = (MARGIN,)
    first_fault: str = ""  # the fault every episode's first write meets ("" = the level's draw)
    stuck: bool = False  # half-done writes never finish
    timeouts_before: bool = False  # the level's timeouts lose the request, not the response
    # effectgate's settings in this part: `unique = "scope"` on its tools, and its window ("" is
    # the run's `--window`); `methods` keeps only these methods ("" = every method of the run).
    unique: bool = False
    window: str = ""
    methods: tuple[str, ...] = ()

    def expected_to_break(self, behaviour: str, margin: float, run_window: str = "") -> bool:
        """Where effectgate's promise does not hold by design, and the part shows it on purpose:
        two step ids for one piece of work without `unique = "scope"` (two logical actions), and
        a fixed window shorter than the lag (a stale read proves a false absence)."""
        diff_step = behaviour == "subagents_diff_step" and not self.unique
        return diff_step or (margin < 1 and (self.window or run_window) != "auto")


def default_parts(seeds: int = 50) -> tuple[Part, ...]:
    half = max(1, seeds // 2)
    conditions = (
        ("partial_finishing", Fault.PARTIAL, False),
        ("partial_stuck", Fault.PARTIAL, True),
        ("timeout_after_commit", Fault.DROP_AFTER_COMMIT, False),
        ("timeout_after_commit_unseen", Fault.DROP_DELAYED, False),
        ("timeout_before_commit", Fault.DROP_BEFORE_COMMIT, False),
    )
    return (
        Part("headline", LEVELS, CRM, seeds=seeds),
        # The study's setting at a provider that honours idempotency keys (Stripe-like): where a
        # durable engine's step key is enough, beside the headline's providers without keys.
        Part("keyed", LEVELS, ("charge_card",), seeds=seeds),
        Part("behaviours", ("medium",), BEHAVIOUR_TASKS, BEHAVIOURS, seeds=half),
        *(Part(name, ("high",), CRM, seeds=half, first_fault=f.value, stuck=stuck) for name, f, stuck in conditions),
        # The sweep's point at MARGIN is the headline's high level on the same seeds (streams).
        Part("sweep", ("high",), CRM, seeds=half, margins=(0.5, 0.8, 3.0)),
        # What the two settings protect from, on the same fault streams as the cells above:
        # subagents with their own step ids on a tool with `unique = "scope"`, and the sweep with
        # a window learned from the provider's read lags instead of one configured below the lag.
        Part("unique_scope", ("medium",), BEHAVIOUR_TASKS, UNIQUE_BEHAVIOURS, seeds=half, unique=True, methods=GATEWAY),
        Part("sweep_auto", ("high",), CRM, seeds=half, margins=(0.5, 0.8, 1.5, 3.0), window="auto", methods=GATEWAY),
    )


def at_least(parts: Sequence[Part], episodes: int) -> tuple[Part, ...]:
    """Every fault family (model.FAMILIES) among `parts` gets at least `episodes` episodes per
    method with keys and without (where it has a task of that kind): the parts of a family short
    of it get more seeds, all of them at least the same number. Parts of one method only (the
    settings' parts) are left alone."""

    def counted(p: Part) -> bool:
        return p.name in FAMILIES and not p.methods

    per_seed: dict[tuple[str, bool], int] = {}
    for p in filter(counted, parts):
        for scenario in p.scenarios:
            kind = (FAMILIES[p.name], scenario in KEYED)
            per_seed[kind] = per_seed.get(kind, 0) + len(p.levels) * len(p.behaviours) * len(p.margins)
    seeds: dict[str, int] = {}
    for (name, _), n in per_seed.items():
        seeds[name] = max(seeds.get(name, 0), -(-episodes // n))
    return tuple(replace(p, seeds=max(p.seeds, seeds[FAMILIES[p.name]])) if counted(p) else p for p in parts)


def optional_parts(seeds: int = 50) -> tuple[Part, ...]:
    """Parts a run names in `--parts` (not recorded by default): the study's setting through an
    MCP upstream without keys (the tracker), every method."""
    return (Part("mcp", LEVELS, (McpCreateIssue.name,), seeds=max(1, seeds // 2)),)


def all_parts(seeds: int = 50) -> tuple[Part, ...]:
    return (*default_parts(seeds), *optional_parts(seeds))


@dataclass(frozen=True)
class Options:
    parts: tuple[Part, ...] = field(default_factory=default_parts)
    methods: tuple[str, ...] = METHODS
    lag: float = DEFAULT_LAG
    crash: bool = False
    parallel: int = 4  # cells at a time; a cell runs all its episodes at once
    # effectgate's window: "" (margin x lag, like every method) or "auto" (learned after a warm-up).
    window: str = ""
    # Seconds for an episode's agents, and again for settling it. A run that restarts engine
    # workers on a loaded machine (a suite beside another) may need more: a worker's launch is
    # most of an episode then, and an episode cut short proves nothing either way.
    budget: float = EPISODE_BUDGET


def fault_plan(part: Part, level: str, seed: int) -> FaultPlan:
    """The study's level, its timeout and delayed-visibility faults drawn independently (as the
    study draws them), so a lost response can also be a write that reads do not show yet."""
    p = STUDY_LEVELS[level]
    timeout, delayed = p[Fault.DROP_AFTER_COMMIT], p[Fault.DELAYED_VISIBILITY]
    if part.timeouts_before:
        split = {"drop_before_commit": timeout, "delayed_visibility": delayed}
    else:
        split = {
            "drop_after_commit": timeout * (1 - delayed),
            "drop_delayed": timeout * delayed,
            "delayed_visibility": delayed * (1 - timeout),
        }
    return FaultPlan.study_level(level, seed=seed, **split)


async def _agent_phase(method: Method, run: Run, crash: bool, budget: float) -> Result:
    result = Result(method.name, run.episode)
    if crash:
        await asyncio.sleep(run.episode.stagger)
    run.t0 = time.monotonic()
    try:
        result.told = await asyncio.wait_for(run_agents(method, run), budget)
    except TimeoutError:
        result.told = Told.UNKNOWN
        run.notes.append("agents ran out of time")
    result.latency = time.monotonic() - run.t0
    if not crash:
        run.state["decisions_at_stop"] = len(run.sim.injector.decisions)
        run.sim.injector.configure(FaultPlan(seed=run.episode.fault_seed))  # the faults stop
    return result


async def _settle_phase(method: Method, run: Run, result: Result, progress: Progress, budget: float) -> Result:
    if result.told is not Told.UNKNOWN:
        result.definite_after = result.latency
    try:
        result.told_final = await asyncio.wait_for(method.settle(run, result.told), budget)
    except TimeoutError:
        result.told_final = Told.UNKNOWN
        run.notes.append("settling ran out of time")
    if result.definite_after is None and result.told_final is not Told.UNKNOWN:
        result.definite_after = time.monotonic() - run.t0
    await asyncio.sleep(run.lag + 0.2)  # every delayed write visible, every finishing one whole
    result.truth = run.scenario.truth(run.sim)
    decisions = run.sim.injector.decisions
    result.first_fault = (decisions[0] or "none") if decisions else "no_write"
    # Writes decided after the faults stopped never fail (conflicts included): each is an effect.
    result.effects_faults_off = len(decisions) - int(run.state.get("decisions_at_stop", len(decisions)))
    result.calls = run.calls
    result.notes = list(run.notes)
    progress.tick(f"{method.name} {run.episode.part} {run.episode.level} {run.episode.scenario}")
    return result


@dataclass(frozen=True)
class Cell:
    part: Part
    method: str
    level: str
    scenario: str
    behaviour: str
    margin: float


async def run_cell(cell: Cell, options: Options, progress: Progress) -> list[Result]:
    scenario = TASKS[cell.scenario]
    part = cell.part
    runs: list[Run] = []
    try:
        for seed in range(part.seeds):
            episode = Episode.draw(part.name, seed, cell.level, cell.scenario, cell.behaviour, cell.margin)
            sim = scenario.make_sim(
                fault_plan(part, cell.level, episode.fault_seed), None if part.stuck else options.lag, options.lag
            )
            if part.first_fault:
                sim.injector.script([part.first_fault])
            url = await sim.start()
            http = httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT, headers=scenario.headers())
            runs.append(Run(episode, scenario, sim, http, options.lag))
        method = METHOD_TYPES[cell.method]()
        method.window = part.window or options.window
        method.unique = part.unique
        with ExitStack() as stack:
            if method.uses_folder:
                method.folder = stack.enter_context(temporary_workdir(f"effectgate-chaos-{cell.method}-", "chaos"))
            return await _run_method(method, runs, options, progress)
    finally:
        for run in runs:
            await run.http.aclose()
            await run.sim.stop()


async def _run_method(method: Method, runs: list[Run], options: Options, progress: Progress) -> list[Result]:
    try:
        await method.open(runs, options.crash)
        acted = await asyncio.gather(*(_agent_phase(method, run, options.crash, options.budget) for run in runs))
        await method.quiesce()
        if method.kills:
            for run in runs:
                run.notes.append(f"{method.kill_note} {method.kills}x during the cell")
        return list(
            await asyncio.gather(
                *(
                    _settle_phase(method, run, result, progress, options.budget)
                    for run, result in zip(runs, acted, strict=True)
                )
            )
        )
    finally:
        await method.close()


def cells(options: Options) -> list[Cell]:
    return [
        Cell(part, method, level, scenario, behaviour, margin)
        for part in options.parts
        for level in part.levels
        for scenario in part.scenarios
        for behaviour in part.behaviours
        for margin in part.margins
        for method in options.methods
        if not part.methods or method in part.methods
    ]


async def run_matrix(options: Options, progress: Progress | None = None) -> list[Result]:
    todo = cells(options)
    progress = progress or Progress(sum(c.part.seeds for c in todo))
    slots = asyncio.Semaphore(options.parallel)

    async def one(cell: Cell) -> list[Result]:
        async with slots:
            return await run_cell(cell, options, progress)

    try:
        done = await asyncio.gather(*(one(cell) for cell in todo))
    finally:
        progress.close()
    return [r for cell in done for r in cell]
