"""An upstream MCP simulator over streamable HTTP on 127.0.0.1, in the test's own process.

    sim = McpHttpSimulator("tracker", token="…", list_lag=0.3)
    await sim.start()          # sim.url is http://127.0.0.1:<port>/mcp
    sim.faults.script(["drop_after_commit", None])
    len(sim.ledger.effects())  # the effects really made
    await sim.restart()        # sessions are gone, the ledger stays
    sim.forget_sessions()      # up all along, but every session id now answers 404
    await sim.stop()

A bearer token is required when `token` is set: anything else is a 401 whose body echoes what was
presented (as careless servers do, so a client that prints bodies leaks it). `drop_after_commit`
applies, then the answer's bytes are cut off mid-response (the client sees the connection close);
`restart` takes the server down with the call in flight and brings a fresh one up on the port.

The port stays the simulator's from its first start to `close()`, also while it is stopped (a
client keeps its URL across a restart, and another process on the machine could take a freed
port meanwhile): stopped, it refuses connections but stays bound (labkit/held_port.py).

Sessions live as a real server's do: a restart forgets every one (a fresh session manager), a
session older than `session_ttl` seconds expires (checked when a request names it), and
`forget_sessions` drops them all at once while the server stays up (an expiry sweep, a load
balancer that moved the client to another replica). A request with a forgotten session id is
answered `404` with the SDK's JSON-RPC error `-32600 Session not found`, as the streamable-HTTP
transport says; the client must initialize anew. `refuse_sessions` answers every initialize 503
(a server that will not open the new session), and the `misrouted_404` fault applies a write and
answers it 404 with an error that is not about the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

import anyio
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effectgate_lab.labkit.held_port import HeldPort
from effectgate_lab.mcp_upstream.ledger import FaultScript, Ledger
from effectgate_lab.mcp_upstream.servers import Hooks, Upstream, build_server

LOOPBACK = "127.0.0.1"
PATH = "/mcp"


class _Server(uvicorn.Server):
    """A uvicorn server that leaves the process's signals alone. sse_starlette finds "the" server
    through the SIGTERM handler uvicorn installs and, once that server stops, ends every event
    stream of the process: with several simulators in one process (the chaos harness runs one per
    episode), stopping one made every other one's sessions fail to open."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def _answer(send: Send, status: int, doc: dict[str, Any]) -> None:
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json")],
    }
    await send(start)
    await send({"type": "http.response.body", "body": json.dumps(doc).encode()})


class _Dropped(Exception):
    """Raised inside the ASGI send to make uvicorn cut the connection."""


class McpHttpSimulator:
    def __init__(
        self,
        kind: str,
        *,
        token: str = "",
        list_lag: float = 0.0,
        visibility_lag: float = 1.0,
        slow_seconds: float = 5.0,
        faults: FaultScript | None = None,
        session_ttl: float | None = None,
    ) -> None:
        self.ledger = Ledger()
        # Another source of faults (the chaos harness maps its seeded plan onto these).
        self.faults = faults or FaultScript()
        self.token = token
        self.upstream = Upstream(
            kind=kind,
            ledger=self.ledger,
            faults=self.faults,
            hooks=Hooks(drop=self._drop, restart=self._restart, misroute=self._misroute),
            list_lag=list_lag,
            visibility_lag=visibility_lag,
            slow_seconds=slow_seconds,
        )
        self.session_ttl = session_ttl
        self._born: dict[str, float] = {}  # session id -> when a request first named it
        self.clock: Callable[[], float] = time.monotonic  # a test moves it to age the sessions
        self.port = 0
        self.restarts = 0
        self.forgotten = 0  # sessions dropped by `forget_sessions`
        self._mcp: Server[Any] | None = None
        self._drops = 0
        self._misroutes = 0
        # While set, a request that would open a session (an initialize) is answered 503.
        self.refuse_sessions = False
        self._server: uvicorn.Server | None = None
        self._held: HeldPort | None = None  # the port, from the first start to close()
        self._release: weakref.finalize[[], McpHttpSimulator] | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{PATH}"

    def effects(self) -> list[dict[str, Any]]:
        return self.ledger.effects()

    async def start(self) -> None:
        if self._held is None:
            self._held = HeldPort()
            self.port = self._held.port
            self._release = weakref.finalize(self, self._held.close)
        sock = self._held.listen().dup()  # uvicorn closes the socket it serves on; the held one stays
        sock.setblocking(False)
        # A fresh server and session manager per start: a restarted server knows no session.
        self._mcp = build_server(self.upstream)
        app = self._mcp.streamable_http_app(streamable_http_path=PATH, host=LOOPBACK)
        config = uvicorn.Config(
            self._guard(app), log_level="critical", lifespan="on", timeout_graceful_shutdown=1, access_log=False
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None
        if self._held is not None:
            self._held.pause()  # refused from now on, and the port still ours

    async def close(self) -> None:
        """Stops for good: a restart a fault began is let finish first, then the server stops
        and its port is let go."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self.stop()
        if self._release is not None:
            self._release()
        self._held = self._release = None

    async def restart(self) -> None:
        """Down and up again on the same port: every session is forgotten, the ledger is kept."""
        await self.stop()
        self.restarts += 1
        await self.start()

    def sessions(self) -> list[str]:
        """The session ids the running server knows."""
        manager = self._manager()
        return list(manager._server_instances) if manager is not None else []

    def forget_sessions(self) -> int:
        """Every session id answers 404 from now on; calls in flight still get their answers (the
        transports end when the server stops). Returns how many were forgotten."""
        manager = self._manager()
        if manager is None:
            return 0
        gone = list(manager._server_instances)
        for session in gone:
            self._forget(manager, session)
        return len(gone)

    def _forget(self, manager: StreamableHTTPSessionManager, session: str) -> None:
        manager._server_instances.pop(session, None)
        manager._session_owners.pop(session, None)
        self.forgotten += 1

    def _expire(self, session: str) -> None:
        manager = self._manager()
        if not session or manager is None or session not in manager._server_instances:
            return
        born = self._born.setdefault(session, self.clock())
        if self.session_ttl is not None and self.clock() - born > self.session_ttl:
            self._forget(manager, session)

    def _manager(self) -> StreamableHTTPSessionManager | None:
        # The SDK keeps sessions in its manager and offers no public way to drop them.
        return self._mcp.session_manager if self._mcp is not None else None

    async def _drop(self) -> None:
        self._drops += 1

    async def _misroute(self) -> None:
        self._misroutes += 1

    async def _restart(self) -> None:
        task = asyncio.create_task(self.restart())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        await anyio.sleep_forever()  # the call dies with the server it was sent to

    def _guard(self, app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            self._expire(headers.get("mcp-session-id", ""))
            presented = headers.get("authorization", "")
            if self.token and presented != f"Bearer {self.token}":
                body = json.dumps({"error": "invalid_token", "presented": presented}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return

            if self.refuse_sessions and "mcp-session-id" not in headers and scope["method"] == "POST":
                await _answer(send, 503, {"error": "no new sessions now"})
                return
            held: list[Message] = []
            answered = False  # a misrouted 404 was sent in place of the answer

            async def cutting(message: Message) -> None:
                nonlocal answered
                if answered:
                    return
                result = message["type"] == "http.response.body" and b'"result"' in message.get("body", b"")
                if result and self._drops:
                    self._drops -= 1
                    for early in held:  # the status went out; the answer never does
                        await send(early)
                    raise _Dropped
                if message["type"] == "http.response.start" and scope["method"] == "POST":
                    held.append(message)  # the status is decided with the body (see misroute)
                    return
                if result and self._misroutes:
                    self._misroutes -= 1
                    error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "upstream route gone"}}
                    await _answer(send, 404, error)
                    answered = True
                    return
                for early in held:
                    await send(early)
                held.clear()
                await send(message)

            try:
                await app(scope, receive, cutting)
            except* _Dropped:
                # Returning without completing the response makes uvicorn close the connection.
                pass

        return guarded
