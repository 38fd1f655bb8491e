"""One live session with the upstream MCP server, reopened when it breaks.

The `mcp` SDK's `Client` is an async context manager whose task group must be left by the task
that entered it, while the gateway calls from many tasks: an owner task holds the session open
and callers use it. A session that broke (the server exited, the HTTP server restarted and
forgot the session, a transport error reached the message handler) is closed and the next
caller opens a fresh one.

Calls fail in three ways the adapter tells apart: `NotSent` (no session could be opened: the
request was never written), `Lost` (the session broke with the request written) and `NoAnswer`
(no answer within the timeout). A JSON-RPC error answer is the SDK's `MCPError`, passed through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

log = logging.getLogger("effectgate.adapters.mcp")


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
    ) -> None:
        self._url = url
        self._command = list(command or [])
        self._env = dict(env or {})
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
        self._on_tools_changed = on_tools_changed
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._opening = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()
        self.opened = 0  # sessions opened so far (a restart shows as one more)

    def __repr__(self) -> str:
        where = "stdio" if self._command else "http"
        return f"Session({where})"

    def _transport(self) -> Any:
        if self._command:
            # The server sees the gateway's environment minus nothing, plus the table's `env`.
            env = {**os.environ, **self._env}
            return StdioServerParameters(command=self._command[0], args=self._command[1:], env=env)
        http = httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30.0, connect=self._connect_timeout))
        return streamable_http_client(self._url, http_client=http)

    async def _handle(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._on_tools_changed()
        elif isinstance(message, Exception):
            log.info("upstream session broke: %s", type(message).__name__)
            self._broken()

    def _broken(self) -> None:
        if self._stop is not None:
            self._stop.set()
        self._client = None

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            client = Client(self._transport(), mode="legacy", message_handler=self._handle)
            async with client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if self._stop is stop:
                self._client = None

    async def client(self) -> tuple[Client, asyncio.Task[None]]:
        """The live session (opened now if there is none); raises NotSent."""
        async with self._opening:
            if self._client is not None and self._owner is not None and not self._owner.done():
                return self._client, self._owner
            ready = self._ready
            if ready is None or ready.done() or self._owner is None or self._owner.done():
                # No session and none opening (a caller cancelled while one opened keeps it going).
                self._retire()
                ready = asyncio.get_running_loop().create_future()
                # Read even when nobody awaits it any more, so it is never "unretrieved".
                ready.add_done_callback(lambda f: f.cancelled() or f.exception())
                self._ready = ready
                stop = asyncio.Event()
                self._stop = stop
                self._owner = asyncio.create_task(self._hold(ready, stop), name="effectgate-mcp-upstream")
            try:
                async with asyncio.timeout(self._connect_timeout):
                    self._client = await asyncio.shield(ready)
            except TimeoutError:
                self._retire()
                raise NotSent(f"no session in {self._connect_timeout:g}s") from None
            except Exception as exc:
                self._retire()
                status = _status_of(exc)
                if status in (401, 403):
                    raise NotSent(f"the upstream refused the credentials (HTTP {status})", refused=True) from None
                why = f"HTTP {status}" if status else _root(exc)
                raise NotSent(f"the upstream is unreachable (no session: {why})") from None
            self.opened += 1
            assert self._owner is not None
            return self._client, self._owner

    async def request(self, send: Callable[[Client], Any], *, timeout: float) -> Any:
        """`send(client)` on the live session; NotSent / Lost / NoAnswer / MCPError."""
        client, owner = await self.client()
        call = asyncio.ensure_future(send(client))
        try:
            done, _ = await asyncio.wait({call, owner}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if call in done:
            try:
                return call.result()
            except MCPError as exc:
                if exc.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                    self._broken()
                    raise Lost(f"the session closed with the call in flight ({exc.error.message})") from None
                raise
            except Exception as exc:
                self._broken()
                raise Lost(f"the session broke with the call in flight ({type(exc).__name__})") from None
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        if owner in done:
            self._broken()
            raise Lost("the upstream went away with the call in flight")
        raise NoAnswer(f"no answer in {timeout:g}s")

    def _retire(self) -> None:
        """Lets the current owner task end on its own (a broken session may take a while to close:
        nobody waits for it); `close` collects them all."""
        owner, self._owner = self._owner, None
        if self._stop is not None:
            self._stop.set()
        self._client = None
        if owner is not None and not owner.done():
            self._retiring.add(owner)
            owner.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        async with self._opening:
            self._retire()
            pending = list(self._retiring)
            if pending:
                _, late = await asyncio.wait(pending, timeout=5)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=5)
