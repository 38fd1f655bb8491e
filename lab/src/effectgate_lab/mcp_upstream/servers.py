"""Two upstream MCP servers, written with the `mcp` SDK, of the kinds agents call today.

- `mail`: `send_message(to, subject, body, idempotency_key?)` deduplicates on the key (a repeat
  answers the first message, no second effect), `list_messages(to?, idempotency_key?)` reads.
- `tracker`: `create_issue(title, body, labels?)` takes no key and creates an issue on every call
  (the servers of agentmail-mcp#49 and orbit#407 behave so on retries); `list_issues(query?)`
  shows an issue only `list_lag` seconds after its creation.

Both keep their effects in a `Ledger` and commit the faults of a `FaultScript` (see `ledger`).
What the transport must do for a fault (drop the connection, go away) is asked through the
`Hooks` the HTTP and stdio runners give.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from effectgate_lab.mcp_upstream.ledger import FaultScript, JsonDict, Ledger

KINDS = ("mail", "tracker")


@dataclass
class Hooks:
    """Transport-level misbehaviour: `drop` loses the answer of the current call, `restart`
    makes the server go away now (both are awaited and never return normally for stdio),
    `misroute` answers the current call HTTP 404 (default: `drop`)."""

    drop: Callable[[], Awaitable[None]]
    restart: Callable[[], Awaitable[None]]
    misroute: Callable[[], Awaitable[None]] | None = None


@dataclass
class Upstream:
    kind: str
    ledger: Ledger
    faults: FaultScript
    hooks: Hooks
    token: str = ""  # the credential the server expects ("" takes any)
    presented: Callable[[], str] = field(default=lambda: "")
    list_lag: float = 0.0
    visibility_lag: float = 1.0
    slow_seconds: float = 5.0
    # Bumped by `change_schema`; the next call announces notifications/tools/list_changed.
    schema_version: int = 1
    _announced: int = 1
    # Who called: the clientInfo (name, version) of each session a call came on.
    clients: set[tuple[str, str]] = field(default_factory=set)

    def change_schema(self) -> None:
        self.schema_version += 1

    # -- the tools --

    def tools(self) -> list[types.Tool]:
        if self.kind == "mail":
            send_props: JsonDict = {
                "to": {"type": "string", "description": "recipient address"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
                "idempotency_key": {"type": "string", "description": "repeats with one key send once"},
            }
            if self.schema_version > 1:
                send_props["reply_to"] = {"type": "string"}
            return [
                _tool("send_message", send_props, ["to", "subject", "body"], "Send an email."),
                _tool(
                    "list_messages",
                    {"to": {"type": "string"}, "idempotency_key": {"type": "string"}},
                    [],
                    "List sent messages.",
                    read_only=True,
                ),
            ]
        create_props: JsonDict = {
            "title": {"type": "string"},
            "body": {"type": "string"},
            "labels": {"type": "array", "items": {"type": "string"}},
        }
        if self.schema_version > 1:
            create_props["priority"] = {"type": "string", "enum": ["low", "high"]}
        return [
            _tool("create_issue", create_props, ["title", "body"], "Create an issue."),
            _tool("list_issues", {"query": {"type": "string"}}, [], "List issues (newest last).", read_only=True),
        ]

    async def call(self, ctx: ServerRequestContext[Any], name: str, args: JsonDict) -> types.CallToolResult:
        params = ctx.session.client_params
        if params is not None:
            self.clients.add((params.client_info.name, params.client_info.version))
        if self._announced != self.schema_version:
            self._announced = self.schema_version
            await ctx.session.send_tool_list_changed()
        if self.token and self.presented() != self.token:
            return _error("unauthorized", "the credential was refused")
        handlers = {
            "send_message": self._send,
            "list_messages": self._list_messages,
            "create_issue": self._create,
            "list_issues": self._list_issues,
        }
        if name not in handlers or name not in {t.name for t in self.tools()}:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}")
        return await handlers[name](args)

    async def _write(self, effect: Callable[[set[str]], JsonDict]) -> types.CallToolResult:
        """One fresh write: decide the faults, apply (or not), answer (or not)."""
        drawn = self.faults.next()
        faults = set(drawn.split("+")) if drawn else set()
        if "restart" in faults:
            await self.hooks.restart()
        if "error_no_effect" in faults:
            return _error("unavailable", "the upstream API is unavailable; nothing was applied")
        if "rate_limit" in faults:
            return _error("rate_limited", "too many requests; retry in 0.1 s", retry_after=0.1)
        if "lands_late" in faults:
            # Applied slow_seconds from now whatever the caller does: a client that gives up
            # (and cancels the request) does not stop it.
            with anyio.CancelScope(shield=True):
                await anyio.sleep(self.slow_seconds)
                done = self.ledger.record(effect(faults))
            return _ok(_public(done))
        done = self.ledger.record(effect(faults))
        if "drop_after_commit" in faults:
            await self.hooks.drop()
        if "misrouted_404" in faults:
            await (self.hooks.misroute or self.hooks.drop)()
        if "slow" in faults:
            await anyio.sleep(self.slow_seconds)
        return _ok(_public(done))

    async def _send(self, args: JsonDict) -> types.CallToolResult:
        missing = [k for k in ("to", "subject", "body") if not isinstance(args.get(k), str)]
        if missing:
            raise MCPError(types.INVALID_PARAMS, f"missing or not a string: {missing}")
        if "@" not in args["to"]:
            return _error("invalid_recipient", f"{args['to']!r} is not an email address")
        key = args.get("idempotency_key")
        if isinstance(key, str) and key:
            for seen in self.ledger.effects():
                if seen.get("idempotency_key") == key:
                    return _ok(_public(seen))  # the dedup: no second effect, the first answer

        def effect(faults: set[str]) -> JsonDict:
            n = len(self.ledger.effects()) + 1
            return {
                "id": f"msg_{n:05d}",
                "to": args["to"],
                "subject": args["subject"],
                # partial: the server lost the body on the way out (the reply shows it).
                "body": "" if "partial" in faults else args["body"],
                "idempotency_key": key if isinstance(key, str) else "",
                "visible_at": time.time() + (self.visibility_lag if "delayed_visibility" in faults else 0.0),
            }

        return await self._write(effect)

    async def _create(self, args: JsonDict) -> types.CallToolResult:
        if not isinstance(args.get("title"), str) or not isinstance(args.get("body"), str):
            raise MCPError(types.INVALID_PARAMS, "title and body (strings) are required")
        if not args["title"].strip():
            return _error("invalid_title", "the title is empty")
        labels = [str(x) for x in args.get("labels") or []]

        def effect(faults: set[str]) -> JsonDict:
            n = len(self.ledger.effects()) + 1
            extra = self.visibility_lag if "delayed_visibility" in faults else 0.0
            return {
                "id": f"iss_{n:05d}",
                "number": n,
                "title": args["title"],
                "body": args["body"],
                # partial: created, but the labels were not applied.
                "labels": [] if "partial" in faults else labels,
                "visible_at": time.time() + self.list_lag + extra,
            }

        return await self._write(effect)

    async def _list_messages(self, args: JsonDict) -> types.CallToolResult:
        now = time.time()
        rows = [
            _public(m)
            for m in self.ledger.effects()
            if m["visible_at"] <= now
            and args.get("to") in (None, m["to"])
            and args.get("idempotency_key") in (None, m["idempotency_key"])
        ]
        return _ok({"messages": rows})

    async def _list_issues(self, args: JsonDict) -> types.CallToolResult:
        now, query = time.time(), str(args.get("query") or "")
        rows = [
            _public(i)
            for i in self.ledger.effects()
            if i["visible_at"] <= now and (query in i["title"] or query in i["body"])
        ]
        return _ok({"issues": rows})


def _tool(name: str, props: JsonDict, required: list[str], description: str, *, read_only: bool = False) -> types.Tool:
    schema: JsonDict = {"type": "object", "properties": props, "required": required}
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        annotations=types.ToolAnnotations(read_only_hint=read_only),
    )


def _public(row: JsonDict) -> JsonDict:
    return {k: v for k, v in row.items() if k not in ("visible_at", "at")}


def _ok(doc: JsonDict) -> types.CallToolResult:
    import json

    return types.CallToolResult(content=[types.TextContent(text=json.dumps(doc))], structured_content=doc)


def _error(code: str, message: str, **extra: Any) -> types.CallToolResult:
    doc = {"error": code, "message": message, **extra}
    return types.CallToolResult(content=[types.TextContent(text=message)], structured_content=doc, is_error=True)


def build_server(upstream: Upstream) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=upstream.tools())

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        return await upstream.call(ctx, params.name, dict(params.arguments or {}))

    return Server(f"sim-{upstream.kind}", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
