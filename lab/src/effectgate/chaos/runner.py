"""Runs the matrix: method x level x scenario cells, each with one episode per seed.

Every episode has a simulator of its own, seeded with the episode's seed, so the i-th write of
an episode meets the same fault under every method, whatever runs concurrently beside it. A cell:

1. the agents act while the faults are on; each episode's latency ends with its agent's answer;
2. the episode's faults stop (and, with --crash, the kills stop);
3. the method may settle what it left open (only effectgate has a reconciler to do that);
4. once every lag has passed, the simulator's ledger says how many effects the request made.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from effectgate.chaos.agent import run_agents
from effectgate.chaos.direct import Direct
from effectgate.chaos.method import Method, Run
from effectgate.chaos.model import (
    BEHAVIOURS,
    HTTP_TIMEOUT,
    LEVELS,
    METHODS,
    SETTLE_SECONDS,
    VISIBILITY_LAG,
    Episode,
    Result,
    Told,
)
from effectgate.chaos.progress import Progress
from effectgate.chaos.scenarios import SCENARIOS
from effectgate.chaos.via_gateway import ViaGateway
from effectgate.chaos.wrapper import Wrapper
from effectgate.simulators.faults import STUDY_LEVELS, Fault, FaultPlan

EPISODE_BUDGET = 30.0  # seconds for the agents of one episode, and again for settling it
METHOD_TYPES: dict[str, Callable[[], Method]] = {
    "direct": Direct,
    "wrapper": Wrapper,
    "effectgate": ViaGateway,
}


@dataclass(frozen=True)
class Options:
    seeds: int = 25
    levels: tuple[str, ...] = LEVELS
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    methods: tuple[str, ...] = METHODS
    behaviours: tuple[str, ...] = BEHAVIOURS
    crash: bool = False
    # Partial (non-atomic) writes finish late, as Stripe's `processing` does; False leaves them half.
    settle: bool = True
    parallel: int = 4  # cells at a time; a cell runs all its episodes at once


def fault_plan(level: str, seed: int) -> FaultPlan:
    """The study's level, its timeout and delayed-visibility faults drawn independently (as the
    study draws them), so a lost response can also be a write that reads do not show yet."""
    p = STUDY_LEVELS[level]
    timeout, delayed = p[Fault.DROP_AFTER_COMMIT], p[Fault.DELAYED_VISIBILITY]
    return FaultPlan.study_level(
        level,
        seed=seed,
        drop_after_commit=timeout * (1 - delayed),
        drop_delayed=timeout * delayed,
        delayed_visibility=delayed * (1 - timeout),
        visibility_lag=VISIBILITY_LAG,
    )


async def _agent_phase(method: Method, run: Run, stagger: bool) -> Result:
    result = Result(method.name, run.episode)
    if stagger:
        await asyncio.sleep(run.episode.stagger)
    run.t0 = time.monotonic()
    try:
        result.told, result.calls = await asyncio.wait_for(run_agents(method, run), EPISODE_BUDGET)
    except TimeoutError:
        result.told = Told.UNKNOWN
        run.notes.append("agents ran out of time")
    result.latency = time.monotonic() - run.t0
    run.sim.injector.configure(FaultPlan(seed=run.episode.seed))  # the faults stop
    return result


async def _settle_phase(method: Method, run: Run, result: Result, progress: Progress) -> Result:
    try:
        result.told_final = await asyncio.wait_for(method.settle(run, result.told), EPISODE_BUDGET)
    except TimeoutError:
        result.told_final = Told.UNKNOWN
        run.notes.append("settling ran out of time")
    await asyncio.sleep(max(VISIBILITY_LAG, SETTLE_SECONDS) + 0.1)
    result.truth = run.scenario.truth(run.sim)
    result.notes = list(run.notes)
    progress.tick(f"{method.name} {run.episode.level} {run.episode.scenario}")
    return result


async def run_cell(
    method_name: str, level: str, scenario_name: str, options: Options, progress: Progress
) -> list[Result]:
    scenario = SCENARIOS[scenario_name]
    runs: list[Run] = []
    try:
        for seed in range(options.seeds):
            episode = Episode.draw(seed, level, scenario_name, options.behaviours)
            sim = scenario.make_sim(fault_plan(level, seed), SETTLE_SECONDS if options.settle else None, VISIBILITY_LAG)
            url = await sim.start()
            http = httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT, headers=scenario.headers())
            runs.append(Run(episode, scenario, sim, http))
        method = METHOD_TYPES[method_name]()
        try:
            await method.open(runs, options)
            acted = await asyncio.gather(*(_agent_phase(method, run, options.crash) for run in runs))
            await method.quiesce()
            if method.kills:
                for run in runs:
                    run.notes.append(f"gateway killed with SIGKILL {method.kills}x during the cell")
            return list(
                await asyncio.gather(
                    *(_settle_phase(method, run, result, progress) for run, result in zip(runs, acted, strict=True))
                )
            )
        finally:
            await method.close()
    finally:
        for run in runs:
            await run.http.aclose()
            await run.sim.stop()


async def run_matrix(options: Options, progress: Progress | None = None) -> list[Result]:
    cells = [(m, lv, sc) for lv in options.levels for sc in options.scenarios for m in options.methods]
    progress = progress or Progress(len(cells) * options.seeds)
    slots = asyncio.Semaphore(options.parallel)

    async def one(cell: tuple[str, str, str]) -> list[Result]:
        async with slots:
            return await run_cell(*cell, options, progress)

    try:
        done = await asyncio.gather(*(one(cell) for cell in cells))
    finally:
        progress.close()
    return [r for cell in done for r in cell]
