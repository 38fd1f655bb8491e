"""The HTTP server of the webhook listener: uvicorn (h11), with the limits an internet-facing door
needs, in front of one handler of whole requests.

uvicorn parses HTTP (h11: a malformed request is a 400 and one WARNING line of its own), serves
TLS and mTLS with the context it is given, and closes idle connections. What it does not do is
here: a deadline on the request head (`HEADER_TIMEOUT`, a slow-drip client is cut off) and on the
body (`BODY_TIMEOUT`, 408), the body cap (413, before anything is read when Content-Length says
so; chunked bodies are refused with 411: providers send a length), a bound on the deliveries one
client address has in flight at once (`PER_CLIENT`; more wait their turn, 503 after
`QUEUE_TIMEOUT`), and one connection per request (`Connection: close`). The handler sees the raw
body bytes (the signature is computed over them) and must not raise; if it does anyway, the
answer is 503 with one line, never a traceback or a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("effectgate.intake")
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 10.0
MAX_HEADER_BYTES = 16 * 1024
PER_CLIENT = 16
QUEUE_TIMEOUT = 10.0
STOP_GRACE = 5

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    # Header names in lower case.
    headers: Mapping[str, str]
    body: bytes
    client: str = ""


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, object]
    headers: Mapping[str, str] | None = None


Handler = Callable[[Request], Awaitable[Response]]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline on the request head: a connection that has not sent
    a whole head `HEADER_TIMEOUT` seconds after it opened is closed (uvicorn times out only idle
    keep-alive connections)."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = self.loop.call_later(HEADER_TIMEOUT, self._too_slow)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self._deadline is not None:  # the head is in
            self._deadline.cancel()
            self._deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._deadline = None
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()


class _Uvicorn(uvicorn.Server):
    """uvicorn inside the gateway's own process: the gateway owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _PerClient:
    """At most `PER_CLIENT` requests of one client address handled at once; the rest wait."""

    def __init__(self) -> None:
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def slot(self, client: str) -> Any:
        semaphore = self._slots.setdefault(client, asyncio.Semaphore(PER_CLIENT))
        self._users[client] = self._users.get(client, 0) + 1
        try:
            try:
                async with asyncio.timeout(QUEUE_TIMEOUT):
                    await semaphore.acquire()
            except TimeoutError:
                raise _Refused(503, "too many deliveries from this address at once") from None
            try:
                yield
            finally:
                semaphore.release()
        finally:
            self._users[client] -= 1
            if not self._users[client]:  # nobody of that address left: forget it
                del self._users[client], self._slots[client]


async def _body(receive: Receive, max_body: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async with asyncio.timeout(BODY_TIMEOUT):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ConnectionError("client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_body:
                raise _Refused(413, f"body larger than {max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _answer(send: Send, response: Response) -> None:
    body = json.dumps(response.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(b"connection", b"close")]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (response.headers or {}).items()]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HttpServer:
    """Serves `handler` on host:port (port 0: any free port) until `stop`."""

    def __init__(self, handler: Handler, *, max_body: int, tls: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._max_body = max_body
        self._tls = tls
        self._clients = _PerClient()
        self._server: _Uvicorn | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI application."""
        if scope["type"] != "http":
            return
        client = scope.get("client") or ("", 0)
        try:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            response = await self._serve(scope, headers, receive, str(client[0]))
        except _Refused as exc:
            response = Response(exc.status, {"error": str(exc)})
        except (TimeoutError, ConnectionError):
            response = Response(408, {"error": "request not received in time"})
        except Exception as exc:  # the handler's own failure: the provider retries
            log.warning("webhook request failed: %s", type(exc).__name__)
            response = Response(503, {"error": "try again later"}, {"Retry-After": "5"})
        with contextlib.suppress(Exception):  # the client may be gone
            await _answer(send, response)

    async def _serve(self, scope: Scope, headers: dict[str, str], receive: Receive, client: str) -> Response:
        if "transfer-encoding" in headers:
            raise _Refused(411, "chunked bodies are not accepted; send Content-Length")
        length = headers.get("content-length", "0")
        if not length.isdigit():
            raise _Refused(400, "bad Content-Length")
        if int(length) > self._max_body:
            raise _Refused(413, f"body larger than {self._max_body} bytes")
        async with self._clients.slot(client):
            body = await _body(receive, self._max_body)
            request = Request(str(scope["method"]).upper(), str(scope["path"]), headers, body, client)
            return await self._handler(request)

    async def start(self, host: str, port: int, *, shared: bool = False) -> int:
        """`shared`: bound with SO_REUSEPORT, beside the other workers of `serve --workers N`
        (the kernel spreads connections over them); otherwise the port is this server's alone."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        tls = self._tls
        config = uvicorn.Config(
            self,
            http=_HeadDeadline,
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            backlog=2048,
            timeout_keep_alive=5,
            timeout_graceful_shutdown=STOP_GRACE,
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            ssl_context_factory=None if tls is None else (lambda _config, _default: tls),
        )
        self._server = _Uvicorn(config)
        self.port = int(sock.getsockname()[1])
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(30):
            while not self._server.started:
                if self._task.done():
                    self._task.result()  # raises why it did not start
                    raise RuntimeError("the webhook listener stopped before it started")
                await asyncio.sleep(0.01)
        return self.port

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._task, STOP_GRACE + 5)
        self._server = self._task = None
