"""One live session with the upstream MCP server, reopened when it ends.

The `mcp` SDK's `Client` is an async context manager whose task group must be left by the task
that entered it, while the gateway calls from many tasks: an owner task holds the session open
and callers use it. A session ends in one of these ways, and the next caller opens a fresh one:

- the server forgot it (it restarted, expired the session, or answers from a replica that never
  knew it): streamable HTTP answers `404` to a request naming the session id, and the transport
  spec says the client must initialize a new session. No tool ran for that request: the call is
  sent once more on the new session (a second 404 in a row is `NotSent`);
- the transport closed (the server exited, the connection broke): the message handler hears of
  it, or a call in flight fails with it.

Calls fail in three ways the adapter tells apart: `NotSent` (nothing reached a tool: no session
could be opened, or the server did not know the session), `Lost` (the session broke with the
request written) and `NoAnswer` (no answer within the timeout). A JSON-RPC error answer is the
SDK's `MCPError`, passed through, unless it came with a 404 for the session (`NotSent`, above) or
with another 404 (`Lost`: a 404 the transport does not define is no proof that no tool ran), or
came to a request the SDK made within the call after the call's own was answered (`Lost`: the
tools/list `call_tool` sends to validate a result, which a server that forgot the session answers
404 after the tool ran; the simulator found a re-send there, `tests/sim/upstream.py`).
The client introduces itself in `initialize` as `effectgate` with its version.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

log = logging.getLogger("effectgate.adapters.mcp")

SESSION_HEADER = "mcp-session-id"
# The JSON-RPC errors a 404 for a session id comes with: the Python SDK's (and the client's own
# stand-in when the body is not JSON-RPC), and the TypeScript SDK's.
SESSION_GONE_CODES = frozenset({types.INVALID_REQUEST, -32001})


@functools.cache  # reading the installed version scans the distributions: once a process
def client_info() -> types.Implementation:
    """Who the gateway is, as upstream servers log and allow-list clients."""
    try:
        mine = version("effectgate")
    except PackageNotFoundError:
        mine = "0+unknown"
    return types.Implementation(name="effectgate", version=mine)


@dataclass
class _Sent:
    """What the HTTP transport saw of one call's request (the SDK posts it in a context copied
    from the caller's, so the response hook finds this through `_SENT`)."""

    status: int = 0  # the HTTP status the call's own request was answered with (0: none seen)
    # Requests the SDK made within the call after its own was answered: `call_tool` lists the
    # tools to validate a result it has not seen the schema of. Their errors come after the tool
    # ran: never the call's refusal, nor a sign that its session was unknown to the server.
    later: int = 0


_SENT: contextvars.ContextVar[_Sent | None] = contextvars.ContextVar("effectgate_mcp_sent", default=None)


class NotSent(Exception):
    """No session: nothing was written. `refused` when the upstream refused the credentials."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class Lost(Exception):
    """The session broke after the request was written."""


class NoAnswer(Exception):
    """No answer within the timeout."""


def _status_of(exc: BaseException) -> int:
    """The HTTP status an SDK or httpx2 error carries, if any (found through groups and causes)."""
    seen: list[BaseException] = [exc]
    while seen:
        current = seen.pop()
        response = getattr(current, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        if isinstance(current, BaseExceptionGroup):
            seen.extend(current.exceptions)
        for nested in (current.__cause__, current.__context__):
            if nested is not None and len(seen) < 20:
                seen.append(nested)
    return 0


def _root(exc: BaseException) -> str:
    """The innermost error's type name (through exception groups), for a one-line reason."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return type(exc).__name__


def _transport_ended(client: Client) -> bool:
    """The transport already ended (a stdio server that exited between calls). The SDK keeps this
    on its dispatcher and says it otherwise only by failing the next request, which would look
    like a call lost in flight; an SDK without the flag leaves that (safe, ambiguous) answer."""
    try:
        dispatcher = getattr(client.session, "_dispatcher", None)
    except Exception:
        return False
    return getattr(dispatcher, "_closed", False) is True


class _Forgotten(Exception):
    """The server answered 404 for the session id: it did not know the session, no tool ran."""


@dataclass(eq=False)
class _Live:
    """One session: its owner task holds it open until `stop` is set."""

    stop: asyncio.Event
    ready: asyncio.Future[Client]
    owner: asyncio.Task[None] | None = None
    client: Client | None = None
    calls: int = 0  # calls in flight on it
    # No new call goes to it; it closes once its calls in flight are done.
    ended: bool = False


class Session:
    def __init__(
        self,
        *,
        url: str = "",
        command: list[str] | None = None,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 5.0,
        on_tools_changed: Callable[[], None] = lambda: None,
        http_transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self._url = url
        self._command = list(command or [])
        self._env = dict(env or {})
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
        self._on_tools_changed = on_tools_changed
        # Where the HTTP requests go (None: the network). A simulator puts an in-process upstream here.
        self._http_transport = http_transport
        self._live: _Live | None = None
        self._opening = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()
        self.opened = 0  # sessions opened so far (a restart shows as one more)
        self.forgotten = 0  # sessions the server no longer knew (a 404 for the session id)

    def __repr__(self) -> str:
        where = "stdio" if self._command else "http"
        return f"Session({where})"

    @property
    def connected(self) -> bool:
        """A session is open and its transport has not ended (as far as the SDK has noticed)."""
        live = self._live
        return live is not None and live.client is not None and not live.ended and not _transport_ended(live.client)

    def _transport(self, live: _Live) -> Any:
        if self._command:
            # The server sees the gateway's environment minus nothing, plus the table's `env`.
            env = {**os.environ, **self._env}
            return StdioServerParameters(command=self._command[0], args=self._command[1:], env=env)

        async def answered(response: httpx2.Response) -> None:
            request = response.request
            if request.method != "POST" or SESSION_HEADER not in request.headers:
                return  # the initialize, the GET stream, the closing DELETE
            sent = _SENT.get()
            if sent is not None and sent.status == 0:
                sent.status = response.status_code
            elif sent is not None:
                sent.later += 1
            if response.status_code == 404:
                self._end(live, forgotten=True)

        http = httpx2.AsyncClient(
            headers=self._headers,
            timeout=httpx2.Timeout(30.0, connect=self._connect_timeout),
            event_hooks={"response": [answered]},
            transport=self._http_transport,
        )
        return streamable_http_client(self._url, http_client=http)

    def _handler(self, live: _Live) -> MessageHandlerFnT:
        async def handle(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                self._on_tools_changed()
            elif isinstance(message, Exception):
                log.info("upstream session broke: %s", type(message).__name__)
                self._end(live, now=True)

        return handle

    def _end(self, live: _Live, *, now: bool = False, forgotten: bool = False) -> None:
        """No new call goes to `live`; it closes now, or (a session the server forgot, whose calls
        in flight may still be answered) when its last call is done."""
        if forgotten and not live.ended:
            self.forgotten += 1
            log.info("the upstream no longer knows the session (HTTP 404): the next call opens a new one")
        live.ended = True
        if self._live is live:
            self._live = None
        if now or live.calls == 0:
            live.stop.set()
        owner = live.owner
        if owner is not None and not owner.done() and owner not in self._retiring:
            # Nobody waits for it to close (that may take a while); `close` collects them all.
            self._retiring.add(owner)
            owner.add_done_callback(self._retiring.discard)

    async def _hold(self, live: _Live) -> None:
        try:
            client = Client(
                self._transport(live), mode="legacy", message_handler=self._handler(live), client_info=client_info()
            )
            async with client:
                live.ready.set_result(client)
                await live.stop.wait()
        except BaseException as exc:
            if not live.ready.done():
                live.ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            live.ended = True
            if self._live is live:
                self._live = None

    async def _open(self) -> _Live:
        """The live session (opened now if there is none); raises NotSent.

        The wait behind another caller's opening counts against `connect_timeout` too: a caller
        queued behind a slow open (a reconciler's read-back, another action) is told "not sent"
        within its own connect timeout, before the driver's attempt timeout cuts it, which could
        only say "may have been sent" (an UNKNOWN to reconcile for a request never made)."""
        live = self._live
        if live is not None and self._usable(live) and not self._opening.locked():
            return live  # what the lock would give at once, without a timer per upstream call
        live = None
        try:
            async with asyncio.timeout(self._connect_timeout), self._opening:
                live = self._opening_session()
                if live.client is None:
                    live.client = await asyncio.shield(live.ready)
                    self.opened += 1
                return live
        except TimeoutError:
            if live is not None:
                self._end(live, now=True)
            raise NotSent(f"the upstream is unreachable (no session in {self._connect_timeout:g}s)") from None
        except Exception as exc:
            assert live is not None  # only the session's opening raises
            self._end(live, now=True)
            status = _status_of(exc)
            if status in (401, 403):
                raise NotSent(f"the upstream refused the credentials (HTTP {status})", refused=True) from None
            why = f"HTTP {status}" if status else _root(exc)
            raise NotSent(f"the upstream is unreachable (no session: {why})") from None

    @staticmethod
    def _usable(live: _Live) -> bool:
        """`live` has a session that `_opening_session` would hand out again as it is."""
        owner = live.owner
        client = live.client
        return (
            client is not None
            and not live.ended
            and owner is not None
            and not owner.done()
            and not _transport_ended(client)
        )

    def _opening_session(self) -> _Live:
        """The live session, or one opening (started now if there is none). Called under the lock."""
        live = self._live
        if live is not None and live.client is not None and _transport_ended(live.client):
            log.info("the upstream's transport ended between calls (the server exited): a new session")
            self._end(live, now=True)
        if live is None or live.ended or live.owner is None or live.owner.done():
            # No session and none opening (a caller cancelled while one opened keeps it going).
            live = _Live(stop=asyncio.Event(), ready=asyncio.get_running_loop().create_future())
            # Read even when nobody awaits it any more, so it is never "unretrieved".
            live.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            live.owner = asyncio.create_task(self._hold(live), name="effectgate-mcp-upstream")
            self._live = live
        return live

    async def client(self) -> Client:
        """The live session's client (opened now if there is none); raises NotSent."""
        live = await self._open()
        assert live.client is not None
        return live.client

    async def request(self, send: Callable[[Client], Any], *, timeout: float) -> Any:
        """`send(client)` on the live session; NotSent / Lost / NoAnswer / MCPError. A request the
        server refused because it did not know the session is sent once more on a new one."""
        for again in (False, True):
            live = await self._open()
            assert live.client is not None
            sent = _Sent()
            live.calls += 1
            token = _SENT.set(sent)
            try:
                call = asyncio.ensure_future(send(live.client))
            finally:
                _SENT.reset(token)
            try:
                return await self._answer(call, live, sent, timeout)
            except _Forgotten:
                if again:
                    raise NotSent("the upstream did not know the new session either (HTTP 404)") from None
            finally:
                live.calls -= 1
                if live.ended and live.calls == 0:
                    live.stop.set()
        raise AssertionError("unreachable")

    async def _answer(self, call: asyncio.Future[Any], live: _Live, sent: _Sent, timeout: float) -> Any:
        owner = live.owner
        assert owner is not None
        try:
            done, _ = await asyncio.wait({call, owner}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if call in done:
            try:
                return call.result()
            except MCPError as exc:
                if sent.later:
                    # The call's own request was answered; a request after it failed.
                    raise Lost(f"a request after the call's answer failed (JSON-RPC error {exc.code})") from None
                if sent.status == 404:
                    if exc.code in SESSION_GONE_CODES:
                        raise _Forgotten from None
                    # Not the transport's "session not found": no proof that no tool ran.
                    raise Lost(f"the upstream answered HTTP 404 with JSON-RPC error {exc.code}") from None
                if exc.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                    self._end(live, now=True)
                    raise Lost(f"the session closed with the call in flight ({exc.error.message})") from None
                raise
            except Exception as exc:
                self._end(live, now=True)
                raise Lost(f"the session broke with the call in flight ({type(exc).__name__})") from None
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        if owner in done:
            self._end(live, now=True)
            raise Lost("the upstream went away with the call in flight")
        raise NoAnswer(f"no answer in {timeout:g}s")

    async def close(self) -> None:
        async with self._opening:
            if self._live is not None:
                self._end(self._live, now=True)
            pending = list(self._retiring)
            if pending:
                _, late = await asyncio.wait(pending, timeout=5)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=5)
