"""An MCP upstream in the simulated world, reached through the real `mcp` adapter.

The upstream is the `mcp` SDK's own server (a lowlevel `Server` behind a
`StreamableHTTPSessionManager`, stateful, JSON answers) mounted as an in-process ASGI app: each
replica's `McpAdapter` reaches it through an httpx2 transport (`Link`) instead of a socket, so its
session handling (`adapters/mcp/connection.py`: one live session, a 404 for the session id →
initialize again and send once more, a second 404 → nothing sent) runs as in production, on the
world's virtual clock. Its tools apply into the world's `SimProvider` ledger:

- `send_message(to, amount, reference, idempotency_key)`: the provider's draws as for the other
  tools (429 and declines with nothing applied, a 5xx-like tool error before or after applying,
  applied `d` seconds after it arrived whatever the caller does, half applied); it does not
  deduplicate on the key (a re-send is a second message), and it stores the key, so a read finds it;
- `list_messages(idempotency_key)`: the messages with that key the read shows (after a lag within
  the declared window), or a read error.

The upstream forgets sessions (`session_forgotten`): the SDK's idle timeout (drawn per world)
expires a session no request used for a while, and at drawn requests naming a session the server
restarts first (a new session manager: every session forgotten, calls in flight on the old one
cut). The link loses the answer of an applied write now and then (`lost`), or answers it with a
404 that is not the transport's "session not found" (`misrouted_404`: a proxy whose route went,
after the tool ran). Session ids are the SDK's uuids: the trace names sessions by their number.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx2
import mcp_types as types
from anyio._backends import _asyncio as anyio_asyncio
from google.protobuf import json_format, struct_pb2
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from effectgate.adapters.base import ActionCall, AdapterError, Observation, Receipt
from effectgate.adapters.mcp import McpAdapter, rules
from effectgate.adapters.mcp import adapter as mcp_adapter
from effectgate.adapters.mcp.settings import McpSettings
from effectgate.adapters.settings import parse_settings
from effectgate.testing.sim.provider import ProviderHooks, SimProvider

if TYPE_CHECKING:
    from tests.sim.world import World

MESSAGE = "message"  # the gateway's tool and adapter
URL = "http://mcp.upstream.sim/mcp"
WINDOW, KEEPS = 3.0, 6.0  # the read lag's bound (declared), how long a write may take to apply
# A world's chance to have the upstream, and an agent's step's chance to call it there.
WORLD_ODDS, STEP_ODDS = 0.3, 0.25
# Each request naming a session: the chance the server restarts first (while faulty); each
# applied write's answer: the chance of a misrouted 404 instead.
RESTART, MISROUTED = 0.04, 0.03
IDLE = (20.0, 60.0)  # the SDK's session idle timeout, drawn per world within this

SETTINGS: dict[str, Any] = {
    "url": URL,
    "tool": "send_message",
    "arguments": {"to": "{to}", "amount": "{amount}", "reference": "{action_id}"},
    "key_argument": "idempotency_key",
    "dedups_on_key": False,
    "consistency_window": WINDOW,
    "timeout": 10.0,
    "connect_timeout": 5.0,
    "verify": {
        "tool": "list_messages",
        "arguments": {"idempotency_key": "{provider_key}"},
        "receipt_id": "result.messages[0].id",
    },
    "match": 'result.messages.exists(m, m.idempotency_key == action.provider_key && m.status == "sent")',
    "absent": "size(result.messages) == 0",
    "no_effect_when": 'result.error == "rate_limited"',
    "retry_after": "result.retry_after",
    "refused_when": 'result.error == "invalid_recipient"',
    "success_when": 'result.status == "sent"',
}


def present(seed: int, off: frozenset[str]) -> bool:
    """Whether a world has the upstream (a draw of its own: the other draws do not move)."""
    return "mcp" not in off and random.Random(f"mcp-world:{seed}").random() < WORLD_ODDS


def payload(amount: int) -> struct_pb2.Struct:
    return json_format.ParseDict({"to": "cus_1@example.com", "amount": amount}, struct_pb2.Struct())


def _result(doc: dict[str, Any], *, error: bool = False) -> types.CallToolResult:
    text = types.TextContent(text=json.dumps(doc, sort_keys=True))
    return types.CallToolResult(content=[text], structured_content=doc, is_error=error)


def _tool(name: str, props: dict[str, Any]) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object", "properties": props})


class Upstream:
    """The server: its tools on the world's provider, its session manager (a restart is a new one)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.provider: SimProvider = world.provider
        self.rng = random.Random(f"mcp:{world.seed}")
        self.forgets = "session_forgotten" not in world.knobs.off
        self.idle = self.rng.uniform(*IDLE) if self.forgets else None
        self.server: Server[Any] = Server(
            "sim-mail", version="1.0.0", on_list_tools=self._list, on_call_tool=self._call
        )
        self.manager: StreamableHTTPSessionManager | None = None
        self.up = asyncio.Event()  # set while a manager serves
        self._running: asyncio.Task[None] | None = None
        self.sessions: dict[str, int] = {}  # the SDK's session ids, numbered as they open
        self.adapters: list[SimMcpAdapter] = []  # every replica's, closed at the end
        self.restarts = 0

    # -- the server's life ----------------------------------------------------------------------

    async def start(self) -> None:
        manager = StreamableHTTPSessionManager(self.server, json_response=True, session_idle_timeout=self.idle)
        ready = asyncio.Event()

        async def run() -> None:
            async with manager.run():
                ready.set()
                await asyncio.Future()  # until the server restarts

        self._running = asyncio.get_running_loop().create_task(run(), name="sim-mcp-upstream")
        await ready.wait()
        self.manager = manager
        self.up.set()

    async def restart(self, why: str) -> None:
        """Down and up again: every session forgotten, the calls in flight on the old one cut."""
        self.restarts += 1
        self.world.counts["mcp_restart"] += 1
        self.world.event(f"mcp upstream restarts ({why}): {len(self._known())} session(s) forgotten")
        old, self.manager = self._running, None
        self.up.clear()
        if old is not None:
            old.cancel()
        await self.start()

    async def shutdown(self) -> None:
        """Once the run is over: every adapter's session closed (its owner task ends), then the
        server stopped, so that no task of the SDK is left pending on the closed loop."""
        for adapter in self.adapters:
            await adapter.close()
        running, self.manager = self._running, None
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    def release(self, loop: asyncio.AbstractEventLoop) -> None:
        """Forgets the world's tasks anyio keeps state of. A finished run leaves tasks pending on
        its closed loop (crashed replicas' sessions, the server's): anyio keeps their state in a
        module-wide map whose values hold the tasks, so they, the loop and the whole world would
        outlive the run, one more each seed (the heap grows, and every collection walks it)."""
        states: Any = getattr(anyio_asyncio, "_task_states", None)
        if states is None:
            return
        for task in [t for t in list(states) if t.get_loop() is loop]:
            del states[task]

    def _known(self) -> list[str]:
        # The SDK keeps its sessions in its manager and offers no public way to list them.
        return list(self.manager._server_instances) if self.manager is not None else []

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        await self.up.wait()  # not while it restarts
        assert self.manager is not None
        await self.manager.handle_request(scope, receive, send)

    def number(self, session: str) -> int:
        return self.sessions.setdefault(session, len(self.sessions) + 1)

    # -- the tools ------------------------------------------------------------------------------

    async def _list(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        keyed = {"idempotency_key": {"type": "string"}}
        send = {"to": {"type": "string"}, "amount": {"type": "number"}, "reference": {"type": "string"}}
        return types.ListToolsResult(tools=[_tool("send_message", {**send, **keyed}), _tool("list_messages", keyed)])

    async def _call(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        args = dict(params.arguments or {})
        if params.name == "send_message":
            return await self._send(args)
        if params.name == "list_messages":
            return await self._read(str(args.get("idempotency_key", "")))
        return _result({"error": "unknown_tool"}, error=True)

    async def _send(self, args: dict[str, Any]) -> types.CallToolResult:
        """The provider's draws, in `SimAdapter.execute`'s order (no 409: it keeps no keys)."""
        p, odds = self.provider, self.provider.odds
        key, action_id = str(args.get("idempotency_key", "")), str(args.get("reference", ""))
        amount = int(args.get("amount", 0))
        roll = p.rng.random()
        lag = WINDOW * p.rng.random()
        fast = p.rng.random() * 2.0
        slow = p.rng.random() < odds.slow
        delay = p.rng.random() * KEEPS if slow else fast
        for kind, chance in (("rate_limited", odds.rate_limited), ("declined", odds.declined)):
            if roll < chance:
                p.counts[f"provider_{kind}"] += 1
                await asyncio.sleep(fast)
                if kind == "declined":
                    return _result({"error": "invalid_recipient"}, error=True)
                return _result({"error": "rate_limited", "retry_after": p.rng.random() * 2}, error=True)
            roll -= chance
        if roll < odds.error_before:
            p.counts["provider_5xx_before"] += 1
            await asyncio.sleep(fast)
            return _result({"error": "unavailable"}, error=True)
        roll -= odds.error_before
        p.note(f"request {MESSAGE} {action_id[:12]} key={key[-8:]} applies in {delay:.3f}s (mcp)")
        partial = roll < odds.partial
        call = ActionCall(action_id, key, struct_pb2.Struct(), "", MESSAGE, "")
        effect = await p.applied_after(call, delay, amount=amount, lag=lag, dedups=False, partial=partial, slow=slow)
        roll -= odds.partial
        if not partial and roll >= odds.lost and roll - odds.lost < odds.error_after:
            p.counts["provider_5xx_after"] += 1
            return _result({"error": "timeout"}, error=True)  # a REST timeout the server reports after applying
        status = "partial" if effect.partial else "sent"
        return _result({"id": effect.external_id, "status": status, "idempotency_key": key})

    async def _read(self, key: str) -> types.CallToolResult:
        p = self.provider
        await asyncio.sleep(p.rng.random() * 0.2)
        if p.rng.random() < p.odds.verify_error:
            p.counts["provider_verify_error"] += 1
            return _result({"error": "unavailable"}, error=True)
        now = p.now()
        seen = [e for e in p.ledger if e.provider_key == key and e.visible_at <= now]
        rows = [
            {"id": e.external_id, "idempotency_key": e.provider_key, "status": "partial" if e.partial else "sent"}
            for e in seen
        ]
        return _result({"messages": rows})


class Link(httpx2.AsyncBaseTransport):
    """One replica's way to the upstream: its HTTP requests delivered to the ASGI app in-process,
    with the network's faults: the answer of an applied write lost, or replaced by a misrouted 404;
    before a request naming a session, a restart of the server."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._app = httpx2.ASGITransport(app=upstream.handle)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        up, world = self.upstream, self.upstream.world
        if request.method == "GET":  # no server-initiated stream (the spec allows a 405)
            return httpx2.Response(405)
        session = request.headers.get("mcp-session-id")
        faulty = world.faulty
        if session and request.method == "POST" and faulty and up.forgets and up.rng.random() < RESTART:
            await up.restart(f"before a request on session {up.number(session)}")
        response = await self._app.handle_async_request(request)
        await response.aread()
        if response.status_code == 404 and session and request.method == "POST":
            world.counts["mcp_session_forgotten"] += 1
            world.event(f"mcp session {up.number(session)} unknown to the upstream: 404")
        fresh = response.headers.get("mcp-session-id")
        if fresh and not session:
            up.number(fresh)
        if not (faulty and request.method == "POST" and response.status_code == 200 and _applied(response)):
            return response
        roll = up.rng.random()
        if "lost" not in world.knobs.off and roll < self.upstream.provider.odds.lost:
            world.counts["mcp_lost_answer"] += 1
            world.event("mcp answer of an applied send_message lost")
            raise httpx2.ReadError("connection reset after the tool ran")
        roll -= self.upstream.provider.odds.lost
        if "misrouted_404" not in world.knobs.off and roll < MISROUTED:
            world.counts["mcp_misrouted_404"] += 1
            world.event("mcp answer of an applied send_message replaced by a misrouted 404")
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": types.INTERNAL_ERROR, "message": "route gone"}}
            return httpx2.Response(404, json=error)
        return response


def _applied(response: httpx2.Response) -> bool:
    """An answer to send_message that says it applied (a sent or half-sent message)."""
    try:
        doc = json.loads(response.content)
    except ValueError:
        return False
    result = doc.get("result") if isinstance(doc, dict) else None
    if not isinstance(result, dict) or result.get("isError"):
        return False
    content = result.get("structuredContent")
    return isinstance(content, dict) and "status" in content


class _Open:
    async def enter(self, kind: str) -> None:
        pass

    async def leave(self, kind: str) -> None:
        pass


@functools.cache
def _settings() -> McpSettings:
    return parse_settings(McpSettings, SETTINGS)


@functools.cache
def _compiled(source: str | None) -> rules.Rule | None:
    return _compile(source)


_compile = mcp_adapter._rule


@contextlib.contextmanager
def _rules_compiled_once() -> Iterator[None]:
    """While an adapter is built, its CEL rules are compiled once a process: compiling is most of
    building one (a replica builds its own at each start), and a compiled rule keeps no state."""
    setattr(mcp_adapter, "_rule", _compiled)  # noqa: B010 - the module's function, for this build
    try:
        yield
    finally:
        setattr(mcp_adapter, "_rule", _compile)  # noqa: B010


class SimMcpAdapter(McpAdapter):
    """The real `McpAdapter` on the world's upstream; each replica's own (its own session), its
    calls through the replica's gate as `SimAdapter`'s are."""

    def __init__(self, upstream: Upstream, hooks: ProviderHooks | None = None) -> None:
        with _rules_compiled_once():
            super().__init__(MESSAGE, _settings(), http_transport=Link(upstream))
        upstream.adapters.append(self)
        self.upstream = upstream
        self.hooks: ProviderHooks = hooks or _Open()

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> McpAdapter:
        raise NotImplementedError("a SimMcpAdapter is built by the simulator, not from a config")

    def with_hooks(self, hooks: ProviderHooks) -> SimMcpAdapter:
        return SimMcpAdapter(self.upstream, hooks)

    async def execute(self, call: ActionCall) -> Receipt:
        await self.hooks.enter("execute")
        try:
            receipt = await super().execute(call)
        except AdapterError:
            await self.hooks.leave("execute")
            raise
        await self.hooks.leave("execute")
        return receipt

    async def verify(self, call: ActionCall) -> Observation:
        await self.hooks.enter("verify")
        seen = await super().verify(call)
        await self.hooks.leave("verify")
        return seen
