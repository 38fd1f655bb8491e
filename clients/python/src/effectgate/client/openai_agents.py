"""OpenAI Agents SDK: effectgate-backed function tools and MCP `_meta` (extra `openai-agents`).

The SDK gives a tool no run id, and a re-plan brings a new `tool_call_id`; resuming one `RunState`
snapshot twice runs an approved tool twice. So the key comes from the app, never from the call:

- run_id: an `AgentRun` in the app's context object (`Runner.run(..., context=...)`), persisted
  with the `RunState` (a mapping context as is; an `AgentRun` through `context_serializer=`);
- step_id: `step=` if given, else the app's current `AgentRun.step`, else the tool's name;
- scope: the business object from the app (`AgentRun.scope` or `scope=`), never the arguments.

    @effect_tool("charge_card", client=lambda: gate, needs_approval=True)
    def charge_deposit(customer: str, amount_cents: int) -> ChargeCard:
        "Charge the order's deposit."
        return ChargeCard(customer=customer, amount=amount_cents, currency="eur", payment_method="pm_card_visa")

For MCP tools behind `effectgate mcp`, `mcp_meta_resolver()` is the `tool_meta_resolver` of
`MCPServerStdio` / `MCPServerStreamableHttp`: it puts the same run context in the call's `_meta`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import grpc
from agents import FunctionTool, RunContextWrapper
from agents.function_schema import function_schema
from agents.mcp import MCPToolMetaContext
from agents.tool_context import ToolContext
from google.protobuf.message import Message
from pydantic import ValidationError

from effectgate.client.client import EffectGateClient
from effectgate.client.context import RunContext
from effectgate.client.tool_text import describe
from effectgate.client.tool_text import refusal as _refusal

# The `_meta` key of `effectgate mcp` (docs/agents.md specifies it).
META_KEY = "dev.effectgate/run"
CONTEXT_KEY = "effectgate"

ClientSource = EffectGateClient | Callable[[], EffectGateClient]
StepSource = str | Callable[["AgentRun"], str] | None
ScopeSource = str | Callable[["AgentRun"], str] | None


class MissingAgentRun(LookupError):
    """The app's context carries no AgentRun: the tool would have no stable key."""


@dataclass
class AgentRun:
    """The run context the app owns; keep it in the run's context object."""

    run_id: str
    scope: str = ""
    step: str = ""
    agent: str = ""
    parent_run_id: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentRun:
        return cls(**{k: str(data.get(k, "")) for k in ("run_id", "scope", "step", "agent", "parent_run_id")})


def agent_run(context: Any) -> AgentRun:
    """The AgentRun in an app context: the context itself, its `effectgate` key or attribute."""
    if isinstance(context, AgentRun):
        return context
    found = context.get(CONTEXT_KEY) if isinstance(context, Mapping) else getattr(context, CONTEXT_KEY, None)
    if isinstance(found, AgentRun):
        return found
    if isinstance(found, Mapping) and found.get("run_id"):
        return AgentRun.from_dict(found)
    raise MissingAgentRun(
        "no effectgate run in the agent's context: run with context=AgentRun(run_id=...) or a mapping "
        f"with {CONTEXT_KEY!r}: {{'run_id': ...}}, and persist it with the RunState"
    )


def _pick(source: StepSource | ScopeSource, run: AgentRun, fallback: str) -> str:
    if source is None:
        return fallback
    return source(run) if callable(source) else source


def run_context(run: AgentRun, *, tool_name: str, step: StepSource = None) -> RunContext:
    return RunContext(
        run_id=run.run_id,
        step_id=_pick(step, run, run.step or tool_name),
        parent_run_id=run.parent_run_id,
        agent=run.agent,
    )


def effect_tool(
    tool: str,
    *,
    client: ClientSource,
    step: StepSource = None,
    scope: ScopeSource = None,
    needs_approval: bool | Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]] = False,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[Callable[..., Message | Awaitable[Message]]], FunctionTool]:
    """Turns a payload builder (its typed parameters are what the model fills in) into a function
    tool that performs `tool` through effectgate at most once per (run, step, scope)."""

    def wrap(build: Callable[..., Message | Awaitable[Message]]) -> FunctionTool:
        schema = function_schema(build, name_override=name, description_override=description)

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            run = agent_run(ctx.context)
            try:
                parsed = schema.params_pydantic_model.model_validate_json(arguments or "{}")
            except ValidationError as exc:
                return f"invalid arguments, nothing was sent: {exc.errors(include_url=False)}"
            args, kwargs = schema.to_call_args(parsed)
            built = build(*args, **kwargs)
            payload = await built if inspect.isawaitable(built) else built
            gate = client() if callable(client) else client
            try:
                answer = await gate.execute(
                    tool,
                    payload,
                    scope=_pick(scope, run, run.scope),
                    context=run_context(run, tool_name=schema.name, step=step),
                    tool_call_id=ctx.tool_call_id,  # tracing only
                )
            except grpc.aio.AioRpcError as exc:
                return _refusal(exc)
            return describe(answer)

        return FunctionTool(
            name=schema.name,
            description=schema.description or "",
            params_json_schema=schema.params_json_schema,
            on_invoke_tool=invoke,
            needs_approval=needs_approval,
        )

    return wrap


def mcp_meta_resolver(
    *, step: StepSource = None, scope: ScopeSource = None
) -> Callable[[MCPToolMetaContext], dict[str, Any]]:
    """A `tool_meta_resolver` for `MCPServerStdio` / `MCPServerStreamableHttp` in front of
    `effectgate mcp`: the app's AgentRun as the call's `_meta` run context."""

    def resolve(meta: MCPToolMetaContext) -> dict[str, Any]:
        run = agent_run(meta.run_context.context)
        ctx = run_context(run, tool_name=meta.tool_name, step=step)
        entry = {
            "run_id": ctx.run_id,
            "step_id": ctx.step_id,
            "scope": _pick(scope, run, run.scope),
            "parent_run_id": ctx.parent_run_id,
            "agent": ctx.agent,
        }
        return {META_KEY: {k: v for k, v in entry.items() if v}}

    return resolve
