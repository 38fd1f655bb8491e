"""The MCP front door: a low-level `mcp` Server whose tools are the gateway's configured tools.

A call is refused unless `_meta` carries the run context (see `contract`); its arguments are
validated against the tool's schema before anything is sent; then one Execute goes to the gateway
with the caller's token. The handler answers in one round (never `InputRequiredResult`), so the
effect happens only in the final round of a call, however often an SDK resends earlier rounds.
"""

from __future__ import annotations

import uuid
from typing import Any

import mcp_types as types
from opentelemetry import propagate, trace

from effectgate.mcp.catalog import Catalog, ToolSpec
from effectgate.mcp.contract import CallContext, MissingRunContext, parse_call_context, trace_carrier
from effectgate.mcp.gateway_port import GatewayPort, GatewayRefusal
from effectgate.mcp.results import action_result, refusal_result, tool_error
from effectgate.mcp.schemas import OUTPUT_SCHEMA, ArgumentCheck, InvalidArguments
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

STATUS_TOOL = "effectgate_action_status"
_STATUS_SCHEMA = {
    "type": "object",
    "properties": {"action_id": {"type": "string", "minLength": 1}},
    "required": ["action_id"],
    "additionalProperties": False,
}
# Waits for a person's decision on the gateway; bounded below the usual host timeout of 60 s.
WAIT_TOOL, WAIT_DEFAULT, WAIT_MAX = "effectgate_wait", 25, 50
_WAIT_SCHEMA = {
    "type": "object",
    "properties": {
        "action_id": {"type": "string", "minLength": 1},
        "seconds": {"type": "integer", "minimum": 1, "maximum": WAIT_MAX, "default": WAIT_DEFAULT},
    },
    "required": ["action_id"],
    "additionalProperties": False,
}


def describe(tool: ToolSpec, check: ArgumentCheck) -> types.Tool:
    default = (
        f"{tool.name} through effectgate: performed at most once per run step "
        f"({tool.payload_type.DESCRIPTOR.full_name})."
    )
    return types.Tool(
        name=tool.name,
        description=tool.description or default,
        input_schema=check.schema,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            read_only_hint=False,
            # Every configured tool changes the world; repeats are absorbed unless on_repeat = allow.
            destructive_hint=True,
            idempotent_hint=not tool.harmless,
            open_world_hint=True,
        ),
    )


class FrontDoor:
    """The call and list handlers; `static_token` serves stdio and in-process transports."""

    def __init__(
        self, catalog: Catalog, gateway: GatewayPort, *, static_token: str = "", tracer: trace.Tracer | None = None
    ) -> None:
        self.catalog = catalog
        self.gateway = gateway
        self.static_token = static_token
        self.tracer = tracer or trace.get_tracer("effectgate.mcp")
        for reserved in (STATUS_TOOL, WAIT_TOOL):
            if reserved in catalog.tools:
                raise ValueError(f"{reserved!r} is reserved for the front door's own tools")
        self.checks = {name: ArgumentCheck(tool) for name, tool in catalog.tools.items()}
        status = types.Tool(
            name=STATUS_TOOL,
            description="The current state of an effectgate action by id (read-only; sends nothing).",
            input_schema=_STATUS_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        wait = types.Tool(
            name=WAIT_TOOL,
            description=(
                "Waits (up to `seconds`) for a person's decision on an action that is AWAITING_APPROVAL, "
                "and answers its state then (read-only; sends nothing). Call it again while the state "
                "is still AWAITING_APPROVAL; never call the original tool with other arguments instead."
            ),
            input_schema=_WAIT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )
        self.tools = [describe(catalog.tools[n], self.checks[n]) for n in sorted(catalog.tools)] + [status, wait]

    def token(self) -> str:
        access = get_access_token()
        return access.token if access is not None else self.static_token

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools)

    def call_context(self, tool: ToolSpec, meta: Any) -> CallContext:
        try:
            return parse_call_context(meta)
        except MissingRunContext as missing:
            if meta and any(k.startswith("dev.effectgate/") for k in meta):
                raise
            if self.catalog.allow_fresh_for_harmless and tool.harmless:
                # Opt-in, and only where the operator declared repeats harmless: a fresh action.
                return CallContext(run_id=f"fresh-{uuid.uuid4().hex}", step_id="fresh")
            raise missing

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        meta: dict[str, Any] = dict(params.meta or {})
        if params.name == STATUS_TOOL:
            return await self._status(params.arguments or {})
        if params.name == WAIT_TOOL:
            return await self._wait(params.arguments or {})
        tool = self.catalog.tools.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
        try:
            call = self.call_context(tool, meta)
        except MissingRunContext as missing:
            raise MCPError(types.INVALID_PARAMS, str(missing)) from None
        try:
            payload = self.checks[tool.name].payload(params.arguments)
        except InvalidArguments as invalid:
            return tool_error(f"invalid arguments, nothing was sent: {invalid}", reason="INVALID_ARGUMENTS")
        parent = propagate.extract(trace_carrier(meta))
        with self.tracer.start_as_current_span("effectgate.mcp.call_tool", context=parent) as span:
            span.set_attribute("effectgate.tool", tool.name)
            span.set_attribute("effectgate.run_id", call.run_id)
            span.set_attribute("effectgate.step_id", call.step_id)
            outgoing: dict[str, str] = {}
            propagate.inject(outgoing)
            try:
                answer = await self.gateway.execute(
                    self.token(), tool.name, payload, call, tool_call_id=f"mcp-{ctx.request_id}", trace=outgoing
                )
            except GatewayRefusal as refusal:
                span.set_attribute("effectgate.refused", refusal.reason or refusal.code.name)
                return refusal_result(refusal)
            span.set_attribute("effectgate.action_id", answer.action.action_id)
        return self._result(answer.action, replayed=answer.replayed)

    def _result(self, action: Any, *, replayed: bool) -> types.CallToolResult:
        spec = self.catalog.tools.get(action.tool)
        return action_result(action, replayed=replayed, approval_ttl=spec.approval_ttl if spec else "")

    async def _wait(self, arguments: dict[str, Any]) -> types.CallToolResult:
        action_id, seconds = arguments.get("action_id"), arguments.get("seconds", WAIT_DEFAULT)
        if not isinstance(action_id, str) or not action_id:
            return tool_error("invalid arguments: action_id (a string) is required", reason="INVALID_ARGUMENTS")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= WAIT_MAX:
            problem = f"invalid arguments: seconds must be an integer 1..{WAIT_MAX}"
            return tool_error(problem, reason="INVALID_ARGUMENTS")
        try:
            answer = await self.gateway.wait(self.token(), action_id, float(seconds))
        except GatewayRefusal as refusal:
            return refusal_result(refusal)
        return self._result(answer.action, replayed=True)

    async def _status(self, arguments: dict[str, Any]) -> types.CallToolResult:
        action_id = arguments.get("action_id")
        if not isinstance(action_id, str) or not action_id:
            return tool_error("invalid arguments: action_id (a string) is required", reason="INVALID_ARGUMENTS")
        try:
            action = await self.gateway.get(self.token(), action_id)
        except GatewayRefusal as refusal:
            return refusal_result(refusal)
        return self._result(action, replayed=True)


def build_server(front: FrontDoor, *, name: str = "effectgate") -> Server[Any]:
    return Server(
        name,
        version="0.1.0",
        instructions=(
            "Tools that change the world (payments, email). Each is performed at most once per run step; "
            "a result that is not CONFIRMED says what to do next. An action AWAITING_APPROVAL waits for a "
            "person: wait with effectgate_wait, never retry it with other arguments."
        ),
        on_list_tools=front.list_tools,
        on_call_tool=front.call_tool,
    )
