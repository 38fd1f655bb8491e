"""Pydantic AI: effectgate-backed tools (extra `pydantic-ai`).

What Pydantic AI keeps stable, and what it does not (docs/agents.md has the table):

- `RunContext.run_id` is the `run_id=` the app passes to `Agent.run` (else a fresh UUID7 per run);
  under the Temporal, DBOS and Prefect durability capabilities it is derived from the workflow or
  flow run, so it survives the engine's re-execution. It is the run id here, unless the app's
  `EffectRun` names one.
- `tool_call_id` changes on every model call (a re-plan, a `ModelRetry`); `run_step` grows with
  every model turn and `retry` with every retry: none of them is a step.
- The step is the app's: `step=` at the call, else `EffectRun.step`, else the tool's name; the
  scope is the business object (`scope=` or `EffectRun.scope`), never the arguments.

    @agent.tool
    async def charge_deposit(ctx: RunContext[EffectRun], customer: str, amount_cents: int) -> str:
        "Charge the order's deposit."
        card = ChargeCard(customer=customer, amount=amount_cents, currency="usd", payment_method="pm_card_visa")
        return await effect(ctx, "charge_card", card)

    await agent.run("charge the deposit", deps=EffectRun(gate, scope="order:1093"), run_id="order-1093")

A gateway that did not settle the call (unreachable, the same action in flight, a deadline) raises
`ModelRetry`: the model calls again, and the call lands on the same action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message
from pydantic_ai import ModelRetry, RunContext

from effectgate.client.client import EffectGateClient
from effectgate.client.context import RunContext as EffectContext
from effectgate.client.tool_text import SETTLE_LATER, describe, refusal, settle_later
from effectgate.v1 import gateway_pb2

DEPS_KEY = "effectgate"


class NoStableRun(LookupError):
    """Neither the app's EffectRun nor Pydantic AI's run context names the run."""


@dataclass
class EffectRun:
    """What the app owns: the client, and optionally the run id, the business scope and the
    current step. Use it as the agent's deps, or put it under `deps.effectgate` (key or attribute).
    Under a durable engine whose deps must serialise, leave the client out (`client=None`) and pass
    `client=` to `effect()` instead."""

    client: EffectGateClient | None = None
    run_id: str = ""
    scope: str = ""
    step: str = ""
    agent: str = ""
    parent_run_id: str = ""


def effect_run(deps: Any) -> EffectRun:
    """The EffectRun in the agent's deps: the deps themselves, their `effectgate` key or attribute;
    an empty one when there is none (then the run id is Pydantic AI's)."""
    if isinstance(deps, EffectRun):
        return deps
    found = deps.get(DEPS_KEY) if isinstance(deps, Mapping) else getattr(deps, DEPS_KEY, None)
    if isinstance(found, EffectRun):
        return found
    if isinstance(found, EffectGateClient):
        return EffectRun(client=found)
    return EffectRun()


def effect_context(ctx: RunContext[Any], *, step: str | None = None) -> EffectContext:
    """The effectgate run context of a tool call: never its tool-call id, run step or retry count."""
    run = effect_run(ctx.deps)
    run_id = run.run_id or ctx.run_id or ""
    if not run_id:
        raise NoStableRun("no run id: pass run_id= to Agent.run (persist it) or EffectRun(run_id=...)")
    step_id = step or run.step or ctx.tool_name or ""
    if not step_id:
        raise NoStableRun("no step: pass step= or EffectRun(step=...)")
    return EffectContext(run_id=run_id, step_id=step_id, parent_run_id=run.parent_run_id, agent=run.agent)


async def execute(
    ctx: RunContext[Any],
    tool: str,
    payload: Message,
    *,
    step: str | None = None,
    scope: str | None = None,
    client: EffectGateClient | None = None,
    timeout: float | None = None,
) -> gateway_pb2.ExecuteResponse:
    """One Execute for this tool call's logical action; raises the gateway's gRPC errors."""
    run = effect_run(ctx.deps)
    gate = client or run.client
    if gate is None:
        raise LookupError("no EffectGateClient: pass client= or put one in EffectRun(client=...)")
    return await gate.execute(
        tool,
        payload,
        scope=scope if scope is not None else run.scope,
        context=effect_context(ctx, step=step),
        tool_call_id=ctx.tool_call_id or "",  # tracing only
        timeout=timeout,
    )


async def effect(
    ctx: RunContext[Any],
    tool: str,
    payload: Message,
    *,
    step: str | None = None,
    scope: str | None = None,
    client: EffectGateClient | None = None,
    timeout: float | None = None,
) -> str:
    """`execute`, answered in words the model can act on; an unsettled call raises `ModelRetry`."""
    try:
        answer = await execute(ctx, tool, payload, step=step, scope=scope, client=client, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in SETTLE_LATER:
            raise ModelRetry(settle_later(exc)) from None
        return refusal(exc)
    return describe(answer)
