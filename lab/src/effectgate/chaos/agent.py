"""The scripted agent: how a real LLM loop behaves around one side-effecting step.

- It re-plans after a timeout or an error: a new tool call with a fresh tool-call id, and (if the
  episode says so) the same arguments written differently.
- `approval_twice`: the run stops for a human approval before the tool runs; the approver clicks
  twice and each click resumes the run, so the step's node runs twice (as LangGraph re-runs a
  node from its start on resume).
- `subagents`: two subagents both believe they own the step and call at the same time.
"""

from __future__ import annotations

import asyncio

from effectgate.chaos.method import Answer, Method, Run
from effectgate.chaos.model import MAX_REPLANS, Told

THINK = 0.05  # the model's turn between a failed call and the re-planned one


async def agent_loop(method: Method, run: Run, agent: str, resume: int) -> tuple[Answer, int]:
    """One agent's tool calls for the step, at most 1 + MAX_REPLANS of them."""
    answer = Answer(Told.FAILURE, final=False)
    calls = 0
    for attempt in range(1 + MAX_REPLANS):
        if attempt:
            await asyncio.sleep(THINK)
        args = run.scenario.args(run.episode.seed, run.episode.paraphrase and attempt > 0)
        answer = await method.call(run, agent, f"call_{agent}_{resume}_{attempt}", args)
        calls += 1
        if answer.detail:
            run.notes.append(f"{agent}#{resume}.{attempt}: {answer.told.value} ({answer.detail})")
        if answer.final:
            break
    return answer, calls


def combine(told: list[Told]) -> Told:
    """What the user hears when several loops answered: any success is reported as success."""
    if Told.SUCCESS in told:
        return Told.SUCCESS
    return Told.UNKNOWN if Told.UNKNOWN in told else Told.FAILURE


async def run_agents(method: Method, run: Run) -> tuple[Told, int]:
    behaviour = run.episode.behaviour
    if behaviour == "approval_twice":
        await method.interrupt_for_approval(run)
        loops = [agent_loop(method, run, "agent", resume) for resume in (1, 2)]
    elif behaviour == "subagents":
        loops = [agent_loop(method, run, name, 0) for name in ("billing", "support")]
    else:
        loops = [agent_loop(method, run, "agent", 0)]
    answers = await asyncio.gather(*loops)
    return combine([a.told for a, _ in answers]), sum(n for _, n in answers)
