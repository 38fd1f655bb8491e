"""CrewAI: effectgate-backed tools (extra `crewai`; CrewAI needs an environment of its own, see
docs/agents.md).

What CrewAI (1.15) keeps stable, and what it does not (docs/agents.md has the table):

- `Crew.id`, `Task.id`, `Agent.id` are fresh UUID4s per object: stable across the retries inside
  one kickoff, new in every process. The kickoff's execution id (`crewai.execution`) is a fresh
  UUID4 per outermost kickoff unless the app binds one with `set_execution_uuid`. So the run id is
  the app's: `EffectRun(run_id=...)` persisted with the request (a Flow's `self.state.id` under
  `@persist`), else the bound execution id.
- A task's `name` (else `Task.key`, a digest of its original description and expected output)
  is the same across the agent's `max_retry_limit` re-executions, guardrail retries, re-kickoffs
  and processes; the step is the app's (`step=` or `EffectRun.step`), else the task's, else the
  tool's name. The scope is the business object, never the model-written arguments.

    @effect_tool("charge_card", run=EffectRun(gate, run_id="order-1093", scope="order:1093"))
    def charge_deposit(customer: str, amount_cents: int) -> ChargeCard:
        "Charge the order's deposit."
        return ChargeCard(customer=customer, amount=amount_cents, currency="usd", payment_method="pm_card_visa")

    Agent(role=..., goal=..., backstory=..., tools=[charge_deposit], llm=...)

A gateway that did not settle the call (unreachable, the same action in flight, a deadline) raises
`EffectNotSettled`: CrewAI re-invokes the tool with the same arguments, then tells the model, whose
next call lands on the same action. A refusal is text saying nothing new was sent.
"""

from __future__ import annotations

import contextvars
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from crewai.context import get_current_task_id
from crewai.execution import get_execution_uuid
from crewai.hooks import register_before_tool_call_hook
from crewai.hooks.tool_hooks import ToolCallHookContext
from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool
from google.protobuf.message import Message
from pydantic import create_model

from effectgate.client.context import RunContext as EffectContext
from effectgate.client.sync import SyncEffectGateClient
from effectgate.client.tool_text import SETTLE_LATER, describe, refusal, settle_later
from effectgate.v1 import gateway_pb2


class NoStableRun(LookupError):
    """Neither the app nor CrewAI names the run (or the step)."""


class EffectNotSettled(RuntimeError):
    """The gateway did not settle the call yet; calling again with the same run is the same action."""


@dataclass
class EffectRun:
    """What the app owns: the client, the run id (persisted with the request), the business scope
    and optionally the current step."""

    client: SyncEffectGateClient | None = None
    run_id: str = ""
    scope: str = ""
    step: str = ""
    agent: str = ""
    parent_run_id: str = ""


# The task of the tool call in flight, as CrewAI's before-tool-call hook saw it: (task id, step).
_task_step: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("effectgate_crewai_task", default=("", ""))
_hooked = False


def _remember_task(context: ToolCallHookContext) -> None:
    task = context.task
    if task is not None:
        _task_step.set((str(task.id), task_step(task)))


def _hook() -> None:
    global _hooked
    if not _hooked:
        register_before_tool_call_hook(_remember_task)
        _hooked = True


def task_step(task: Any) -> str:
    """A task's stable step: its name, else `task:<Task.key>` (original description + expected output)."""
    return str(task.name) if task.name else f"task:{task.key}"


def current_task_step() -> str:
    """The step of the task whose tool is running now, or "" outside one."""
    task_id, step = _task_step.get()
    return step if task_id and task_id == get_current_task_id() else ""


def effect_context(run: EffectRun, *, step: str | None = None, tool_name: str = "") -> EffectContext:
    """The effectgate run context of a tool call: never the model's arguments or an attempt count."""
    run_id = run.run_id or get_execution_uuid() or ""
    if not run_id:
        raise NoStableRun("no run id: pass EffectRun(run_id=...) (persist it with the request)")
    step_id = step or run.step or current_task_step() or tool_name
    if not step_id:
        raise NoStableRun("no step: pass step= or EffectRun(step=...)")
    return EffectContext(run_id=run_id, step_id=step_id, parent_run_id=run.parent_run_id, agent=run.agent)


def execute(
    run: EffectRun,
    tool: str,
    payload: Message,
    *,
    step: str | None = None,
    scope: str | None = None,
    tool_name: str = "",
    timeout: float | None = None,
) -> gateway_pb2.ExecuteResponse:
    """One Execute for this tool call's logical action; raises the gateway's gRPC errors."""
    if run.client is None:
        raise LookupError("no SyncEffectGateClient: EffectRun(client=...)")
    context = effect_context(run, step=step, tool_name=tool_name or tool)
    return run.client.execute(
        tool, payload, scope=scope if scope is not None else run.scope, context=context, timeout=timeout
    )


def effect(
    run: EffectRun,
    tool: str,
    payload: Message,
    *,
    step: str | None = None,
    scope: str | None = None,
    tool_name: str = "",
    timeout: float | None = None,
) -> str:
    """`execute`, answered in words the model can act on; an unsettled call raises `EffectNotSettled`."""
    _hook()
    try:
        answer = execute(run, tool, payload, step=step, scope=scope, tool_name=tool_name, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        if exc.code() in SETTLE_LATER:
            raise EffectNotSettled(settle_later(exc)) from None
        return refusal(exc)
    return describe(answer)


def effect_tool(
    tool: str,
    *,
    run: EffectRun,
    name: str | None = None,
    step: str | None = None,
    scope: str | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[..., Message]], BaseTool]:
    """A CrewAI tool from a payload builder: its typed parameters are the tool's schema (what the
    model fills in), its docstring the description; it returns the payload message."""
    _hook()

    def make(builder: Callable[..., Message]) -> BaseTool:
        tool_name = name or builder.__name__
        hints = typing.get_type_hints(builder)
        hints.pop("return", None)
        fields: dict[str, Any] = {arg: (kind, ...) for arg, kind in hints.items()}
        schema = create_model(f"{tool_name.title().replace('_', '')}Args", **fields)

        def call(**arguments: Any) -> str:
            payload = builder(**arguments)
            return effect(run, tool, payload, step=step, scope=scope, tool_name=tool_name, timeout=timeout)

        made: BaseTool = Tool(name=tool_name, description=builder.__doc__ or tool_name, func=call, args_schema=schema)
        return made

    return make
