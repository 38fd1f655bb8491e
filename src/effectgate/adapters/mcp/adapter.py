"""The `mcp` adapter: the provider is an upstream MCP server (payload: google.protobuf.Struct).

One `[adapters.NAME]` table with `kind = "mcp"` names the upstream (a `url` for streamable HTTP,
or a `command` for stdio), the upstream `tool` a write becomes, where the gateway's key goes
(`key_argument`, `key_meta`, or nowhere), and how to prove the effect: a `verify` read tool on
the same server with templated arguments, a CEL `match` rule that proves presence and an
`absent` rule that proves absence (see `rules` for what they see, `outcome` for how answers are
classified). Without `verify` the adapter has no read API and always answers UNKNOWN.

The upstream's `tools/list` is cached (refreshed on `notifications/tools/list_changed`):
`normalize` checks a payload against the tool's input schema, minus the key argument the
gateway fills itself; `probe` (`effectgate check --probe`) refuses an upstream that does not
list the tool or the read tool, or whose tool takes no `key_argument`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, cast

import httpx2
import mcp_types as types
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from jsonschema import Draft202012Validator
from mcp import Client
from mcp.shared.exceptions import MCPError

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    Capabilities,
    DefinitiveError,
    InvalidPayload,
    JsonDict,
    Observation,
    Outcome,
    Receipt,
)
from effectgate.adapters.mcp import outcome, rules
from effectgate.adapters.mcp.connection import Lost, NoAnswer, NotSent, Session
from effectgate.adapters.mcp.settings import McpSettings
from effectgate.adapters.secrets import quiet_transport_loggers, resolved_secrets
from effectgate.adapters.settings import parse_settings

_MAX_PAGES = 50
READ_TRIES = 4


def _rule(source: str | None) -> rules.Rule | None:
    return rules.Rule(source) if source is not None else None


class McpAdapter(Adapter):
    payload_type = struct_pb2.Struct

    def __init__(
        self, name: str, settings: McpSettings, *, http_transport: httpx2.AsyncBaseTransport | None = None
    ) -> None:
        """`http_transport`: where a streamable HTTP upstream's requests go instead of the network
        (an in-process upstream, as `tests/sim` runs one on virtual time)."""
        self.name = name
        self._s = settings
        self._token = settings.secret("token", required=False)
        headers = dict(settings.headers)
        env = dict(settings.env)
        if self._token:
            scheme = settings.auth_scheme
            headers[settings.auth_header] = f"{scheme} {self._token}" if scheme else self._token
            env[settings.token_variable] = self._token
        self._rules = {
            k: _rule(getattr(settings, k))
            for k in ("no_effect_when", "refused_when", "retry_after", "success_when", "receipt_id", "match", "absent")
        }
        self._read_receipt = _rule(settings.verify.receipt_id) if settings.verify else None
        self._capabilities = Capabilities(
            dedups_on_key=settings.dedups,
            key_retention=settings.key_retention if settings.dedups else None,
            consistency_window=settings.consistency_window,
            has_read_api=settings.verify is not None,
        )
        self._tools: dict[str, types.Tool] | None = None
        self._validator: Draft202012Validator | None = None
        self._refreshing: asyncio.Task[None] | None = None
        self.schema_changes = 0
        # Set each time a tools/list read after a change announcement has completed.
        self.schema_refreshed = asyncio.Event()
        quiet_transport_loggers()
        self._session = Session(
            url=settings.url,
            command=settings.command,
            env=env,
            headers=headers,
            connect_timeout=settings.connect_timeout,
            on_tools_changed=self._tools_changed,
            http_transport=http_transport,
        )

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> McpAdapter:
        return cls(name, parse_settings(McpSettings, settings))

    def __repr__(self) -> str:
        where = "stdio" if self._s.command else "http"
        return f"McpAdapter(name={self.name!r}, tool={self._s.tool!r}, transport={where})"

    @property
    def sessions(self) -> tuple[int, int]:
        """Upstream sessions opened so far, and how many of them the server forgot (a 404)."""
        return self._session.opened, self._session.forgotten

    @property
    def connected(self) -> bool:
        """A session with the upstream is open and its transport has not ended."""
        return self._session.connected

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # -- the upstream's tools and schema --

    async def upstream_tools(self, *, refresh: bool = False) -> dict[str, types.Tool]:
        """The upstream's `tools/list` (every page), cached until it announces a change."""
        if self._tools is None or refresh:
            found: dict[str, types.Tool] = {}
            cursor: str | None = None
            for _ in range(_MAX_PAGES):

                async def page(client: Client, at: str | None = cursor) -> types.ListToolsResult:
                    return await client.list_tools(cursor=at, cache_mode="refresh")

                listed = await self._session.request(page, timeout=self._s.timeout)
                found.update({t.name: t for t in listed.tools})
                cursor = listed.next_cursor
                if not cursor:
                    break
            self._tools = found
            schema = self.input_schema()
            self._validator = Draft202012Validator(schema) if schema is not None else None
        return self._tools

    def input_schema(self) -> JsonDict | None:
        """The upstream tool's input schema without the key argument (None before the first list)."""
        tool = (self._tools or {}).get(self._s.tool)
        if tool is None:
            return None
        schema: JsonDict = dict(tool.input_schema)
        key = self._s.key_argument
        if key:
            schema["properties"] = {k: v for k, v in dict(schema.get("properties") or {}).items() if k != key}
            schema["required"] = [r for r in schema.get("required") or [] if r != key]
        return schema

    def _tools_changed(self) -> None:
        self._tools, self._validator = None, None
        self.schema_changes += 1
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    async def _refresh(self) -> None:
        with contextlib.suppress(NotSent, Lost, NoAnswer, MCPError):
            await self.upstream_tools()
            self.schema_refreshed.set()

    # -- the contract --

    def normalize(self, payload: Message) -> Message:
        assert isinstance(payload, struct_pb2.Struct)
        if self._s.key_argument and self._s.key_argument in payload.fields:
            raise InvalidPayload(self._s.key_argument, f"{self.name}: the gateway sets {self._s.key_argument!r} itself")
        if self._validator is not None and self._s.arguments is None:
            error = next(iter(self._validator.iter_errors(json_format.MessageToDict(payload))), None)
            if error is not None:
                field = str(error.path[0]) if error.path else ""
                raise InvalidPayload(field, f"{self.name}: {error.message}")
        return payload

    def _values(self, call: ActionCall) -> JsonDict:
        assert isinstance(call.payload, struct_pb2.Struct)
        payload: JsonDict = json_format.MessageToDict(call.payload)
        action = {
            "action_id": call.action_id,
            "provider_key": call.provider_key,
            "scope": call.scope,
            "tool": call.tool,
            "tenant": call.tenant,
        }
        return {"payload": payload, "action": action}

    def _arguments(self, values: JsonDict, template: Any) -> JsonDict:
        names = {**values["payload"], **values["action"]}
        filled = rules.fill(template, names)
        return dict(filled) if isinstance(filled, Mapping) else {}

    def _secrets(self) -> frozenset[str]:
        return resolved_secrets() | {self._token} if self._token else resolved_secrets()

    async def _call(self, tool: str, args: JsonDict, meta: JsonDict | None) -> types.CallToolResult:
        async def send(client: Client) -> types.CallToolResult:
            return await client.call_tool(tool, args, meta=cast(Any, meta))

        result: types.CallToolResult = await self._session.request(send, timeout=self._s.timeout)
        return result

    async def _read(self, tool: str, args: JsonDict) -> types.CallToolResult:
        """A read may be sent again freely: a session that cannot be opened (an upstream
        restarting) is tried a few times before the read gives up (the gateway bounds it)."""
        for attempt in range(READ_TRIES):
            try:
                return await self._call(tool, args, None)
            except (NotSent, Lost):
                if attempt == READ_TRIES - 1:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def execute(self, call: ActionCall) -> Receipt:
        values = self._values(call)
        what = f"{self.name} {self._s.tool}"
        try:
            args = (
                self._arguments(values, self._s.arguments) if self._s.arguments is not None else dict(values["payload"])
            )
        except KeyError as missing:
            raise DefinitiveError(
                f"{what}: the payload lacks {missing}; nothing was sent", code="invalid_payload"
            ) from None
        if self._s.key_argument:
            args[self._s.key_argument] = call.provider_key
        meta = {self._s.key_meta: call.provider_key} if self._s.key_meta else None
        try:
            result = await self._call(self._s.tool, args, meta)
        except (NotSent, Lost, NoAnswer) as exc:
            raise outcome.transport_error(exc, what) from None
        except MCPError as exc:
            raise outcome.rpc_error(exc.code, exc.error.message, what, self._secrets()) from None
        secrets = self._secrets()
        doc = outcome.document(result, secrets)
        activation = {**values, "result": doc}
        if result.is_error:
            raise outcome.tool_error(
                activation,
                outcome.summary(result, doc, secrets),
                what,
                no_effect_when=self._rules["no_effect_when"],
                refused_when=self._rules["refused_when"],
                retry_after=self._rules["retry_after"],
            )
        success = self._rules["success_when"]
        if success is not None and not success.holds(activation):
            raise AmbiguousError(
                f"{what}: answered, but not the whole effect ({success.source} does not hold)", code="partial"
            )
        return Receipt(external_id=self._external(self._rules["receipt_id"], activation, call), result=doc)

    def _external(self, rule: rules.Rule | None, activation: JsonDict, call: ActionCall) -> str:
        if rule is not None:
            try:
                value = rule.evaluate(activation)
            except Exception:
                value = None
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)[:200]
        doc = activation["result"]
        found = doc.get("id") if isinstance(doc, dict) else None
        return str(found)[:200] if isinstance(found, str | int) and not isinstance(found, bool) else call.action_id

    async def verify(self, call: ActionCall) -> Observation:
        spec = self._s.verify
        match = self._rules["match"]
        if spec is None or match is None:
            return Observation.unknown(f"no read API: {self.name} has no `verify` read tool configured")
        values = self._values(call)
        try:
            args = self._arguments(values, spec.arguments)
        except KeyError as missing:
            return Observation.unknown(f"{self.name}: the read's arguments need {missing}")
        try:
            result = await self._read(spec.tool, args)
        except (NotSent, Lost, NoAnswer) as exc:
            return Observation.unknown(f"{self.name} verify ({spec.tool}) failed: {exc}")
        except MCPError as exc:
            return Observation.unknown(f"{self.name} verify ({spec.tool}) answered JSON-RPC error {exc.code}")
        secrets = self._secrets()
        doc = outcome.document(result, secrets)
        if result.is_error:
            return Observation.unknown(
                f"{self.name} verify ({spec.tool}) answered an error: {outcome.summary(result, doc, secrets)}"
            )
        activation = {**values, "result": doc}
        if match.holds(activation):
            receipt = Receipt(external_id=self._external(self._read_receipt, activation, call), result=doc)
            return Observation(
                Outcome.CONFIRMED, detail=f"{spec.tool}: {match.source} holds", evidence=doc, receipt=receipt
            )
        absent = self._rules["absent"]
        if absent is not None and absent.holds(activation):
            return Observation(Outcome.NOT_FOUND, detail=f"{spec.tool}: {absent.source} holds")
        hint = "" if absent is not None else " (no `absent` rule is configured)"
        return Observation.unknown(f"{spec.tool}: neither the match nor the absence rule holds{hint}")

    # -- ProbesCredentials: `effectgate check --probe` --

    async def probe(self) -> str:
        try:
            tools = await self.upstream_tools(refresh=True)
        except (NotSent, Lost, NoAnswer) as exc:
            raise outcome.transport_error(exc, f"{self.name} tools/list") from None
        except MCPError as exc:
            raise AdapterError(f"{self.name} tools/list: JSON-RPC error {exc.code}", code="tools_list") from None
        listed = ", ".join(sorted(tools)) or "none"
        wanted = [self._s.tool] + ([self._s.verify.tool] if self._s.verify else [])
        for name in wanted:
            if name not in tools:
                raise AdapterError(f"the upstream lists no tool {name!r} (it lists: {listed})", code="unknown_tool")
        key = self._s.key_argument
        props = dict(tools[self._s.tool].input_schema.get("properties") or {})
        if key and key not in props:
            raise AdapterError(f"the upstream's {self._s.tool!r} takes no argument {key!r}", code="unknown_argument")
        return f"tools/list lists {' and '.join(repr(n) for n in wanted)}"

    async def close(self) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
            with contextlib.suppress(BaseException):
                await self._refreshing
        await self._session.close()
