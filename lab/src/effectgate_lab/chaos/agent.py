"""The scripted agent: how a real LLM loop behaves around one side-effecting step.

Every behaviour re-plans after a failure or an unknown: a new tool call with a fresh tool-call
id (at most MAX_REPLANS times). On top of that:

- `single`: nothing else; the study's setting (one agent, the same arguments on re-plans).
- `replan_paraphrase`: re-plans write the arguments differently (`12` vs `"12.00"` dollars,
  `USD` vs `usd`); the typed tool schema normalizes both to the same provider request.
- `resume`: after the agent answered, its process dies before the checkpoint and the run is
  resumed: the step's node runs again from its start (as LangGraph re-runs a node on resume),
  with a fresh tool-call id; the user hears the resumed run's answer.
- `approval_twice`: the run waits for a human approval and the human clicks twice, both clicks at
  once. The app's approval is idempotent (a compare-and-set): one click resumes the run. The
  engines (Restate, DBOS) wait for the person with their own primitive instead (an awakeable,
  DBOS `recv`): the agent's tool call starts the handler or workflow, which asks for approval and
  waits; both clicks answer it through the engine's API (resolve, `DBOS.send`).
- `subagents_same_step`: two subagents both believe they own the step and call at the same
  time, with the step id the orchestrator gave the step.
- `subagents_diff_step`: the same, but the orchestrator gave each subagent a step id of its own.
"""

from __future__ import annotations

import asyncio

from effectgate_lab.chaos.methods.method import Answer, Method, Run
from effectgate_lab.chaos.model import MAX_REPLANS, Told

THINK = 0.05  # the model's turn between a failed call and the re-planned one
STEP = "step-1"


async def agent_loop(method: Method, run: Run, agent: str, step: str, tag: str, paraphrase: bool) -> Answer:
    """One agent's tool calls for the step, at most 1 + MAX_REPLANS of them."""
    answer = Answer(Told.FAILURE, final=False)
    run.steps.add(step)
    for attempt in range(1 + MAX_REPLANS):
        if attempt:
            await asyncio.sleep(THINK)
        args = run.scenario.args(run.episode.seed, paraphrase and attempt > 0)
        answer = await method.call(run, agent, step, f"call_{agent}_{tag}_{attempt}", args)
        run.calls += 1
        if answer.detail:
            run.notes.append(f"{agent}/{tag}.{attempt}: {answer.told.value} ({answer.detail})")
        if answer.final or answer.told is Told.SUCCESS:
            break
    return answer


def combine(told: list[Told]) -> Told:
    """What the user hears when several loops answered: any success is reported as success."""
    if Told.SUCCESS in told:
        return Told.SUCCESS
    return Told.UNKNOWN if Told.UNKNOWN in told else Told.FAILURE


async def native_approval(method: Method, run: Run) -> Told:
    """The engine waits for the person: the agent's loop and the two clicks run at once. Both
    clicks see the request in the same turn of the event loop and are delivered in full; a click
    still waiting for a request when the loop has answered has nothing left to approve."""
    loop = asyncio.ensure_future(agent_loop(method, run, "agent", STEP, "0", False))
    delivering: list[asyncio.Future[bool]] = []

    async def click() -> None:
        token = await method.approval_asked(run, STEP)
        delivering.append(asyncio.ensure_future(method.approve(run, token)))

    waiting = [asyncio.ensure_future(click()) for _ in range(2)]
    try:
        return (await loop).told
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        outcomes = await asyncio.gather(*delivering, return_exceptions=True)
        run.notes.append(f"approval: {sum(o is True for o in outcomes)} of 2 clicks delivered")
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                run.notes.append(f"click failed: {type(outcome).__name__}: {outcome}")


async def run_agents(method: Method, run: Run) -> Told:
    behaviour = run.episode.behaviour
    if behaviour in ("single", "replan_paraphrase"):
        answer = await agent_loop(method, run, "agent", STEP, "0", behaviour == "replan_paraphrase")
        return answer.told
    if behaviour == "resume":
        await agent_loop(method, run, "agent", STEP, "0", False)
        return (await agent_loop(method, run, "agent", STEP, "resumed", False)).told
    if behaviour == "approval_twice" and method.approves:
        return await native_approval(method, run)
    if behaviour == "approval_twice":
        approved = False

        async def click() -> Told | None:
            nonlocal approved
            if approved:  # compare-and-set: no await between the read and the write
                return None
            approved = True
            return (await agent_loop(method, run, "agent", STEP, "0", False)).told

        clicks = await asyncio.gather(click(), click())
        return combine([t for t in clicks if t is not None])
    steps = {"billing": STEP, "support": STEP}
    if behaviour == "subagents_diff_step":
        steps = {"billing": "step-billing", "support": "step-support"}
    answers = await asyncio.gather(*(agent_loop(method, run, a, s, "0", False) for a, s in steps.items()))
    return combine([a.told for a in answers])
