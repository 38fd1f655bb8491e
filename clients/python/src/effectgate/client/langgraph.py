"""LangGraph: the run context of an effect from the graph's own runtime (extra `langgraph`).

LangGraph re-runs a node from its top after `interrupt()`, after a crash replayed from a
checkpoint and under `RetryPolicy`. What stays the same across all three is the runtime's
`execution_info`: the `thread_id`, and the task's `checkpoint_ns` (`node:<task_id>`, nested with
`|` inside subgraphs). So:

- run_id  = the thread (`lg:<thread_id>`): a resumed thread keeps it;
- step_id = the task's `checkpoint_ns`: the same task re-run is the same step; another super-step,
  another `Send` branch or a time-travel fork is another task, hence another action;
- scope   = your business object; several effects in one node need distinct scopes;
- the tenant is the gateway token of the client in the graph's runtime context.

`step=` replaces the task with a logical step name for effects that must survive re-plans across
super-steps (the prebuilt `ToolNode`: the model asks again in a later loop turn, a new task).

    @dataclass
    class AppContext:
        effectgate: EffectGateClient

    async def charge(state: State) -> dict:
        answer = await execute_in_node("charge_card", ChargeCard(...), scope=f"order:{state['order']}")
        ...
    graph = builder.compile(checkpointer=saver)
    await graph.ainvoke(inputs, {"configurable": {"thread_id": "t-1"}}, context=AppContext(client))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message
from langgraph.runtime import get_runtime

from effectgate.client.client import EffectGateClient
from effectgate.client.context import RunContext
from effectgate.v1 import gateway_pb2

CLIENT_KEY = "effectgate"


class NoStableRunContext(RuntimeError):
    """The graph runs without what makes a key stable: a checkpointer and a thread_id."""


def effect_context(*, step: str = "", agent: str = "") -> RunContext:
    """The run context of the current node's task (call it inside a node)."""
    try:
        runtime = get_runtime()
    except RuntimeError as exc:
        raise NoStableRunContext("effect_context() must be called inside a LangGraph node") from exc
    info = runtime.execution_info if runtime is not None else None
    if info is None or not info.thread_id:
        raise NoStableRunContext(
            "effectgate needs a stable run: compile the graph with a checkpointer and invoke it with "
            "config={'configurable': {'thread_id': ...}}; without them a resume would be a new action"
        )
    step_id = step or info.checkpoint_ns
    if not step_id:
        raise NoStableRunContext("the node's task has no checkpoint namespace; pass step= explicitly")
    return RunContext(run_id=f"lg:{info.thread_id}", step_id=step_id, agent=agent)


def runtime_client() -> EffectGateClient:
    """The client (hence the tenant's token) in the runtime context: attribute or key `effectgate`."""
    context: Any = get_runtime().context
    found = context.get(CLIENT_KEY) if isinstance(context, Mapping) else getattr(context, CLIENT_KEY, None)
    if not isinstance(found, EffectGateClient):
        raise NoStableRunContext(
            f"no EffectGateClient in the graph's runtime context: pass context=... with a {CLIENT_KEY!r} "
            "attribute or key (its token picks the tenant), or pass client= explicitly"
        )
    return found


async def execute_in_node(
    tool: str,
    payload: Message,
    *,
    scope: str,
    step: str = "",
    agent: str = "",
    client: EffectGateClient | None = None,
    tool_call_id: str = "",
    timeout: float | None = 30.0,
) -> gateway_pb2.ExecuteResponse:
    """Performs `tool` at most once for this node's task (or `step`) and `scope`; every re-run
    of the node gets the same action back."""
    context = effect_context(step=step, agent=agent)
    gate = client or runtime_client()
    return await gate.execute(tool, payload, scope=scope, context=context, tool_call_id=tool_call_id, timeout=timeout)
