"""A small HTTP/1.1 server for provider callbacks: one request per connection, a bounded body.

Providers POST a small signed JSON body and read only the status; this needs no web framework.
Each connection is read with a deadline, the body is capped, and the connection is closed after
the answer (`Connection: close`). TLS, when configured, is the asyncio server's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("effectgate.intake")
READ_TIMEOUT = 10.0
MAX_HEADER_BYTES = 16 * 1024
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large"}
REASONS |= {503: "Service Unavailable", 500: "Internal Server Error"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    # Header names in lower case.
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, object]
    headers: Mapping[str, str] | None = None


Handler = Callable[[Request], Awaitable[Response]]


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _read_request(reader: asyncio.StreamReader, max_body: int) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise HttpError(400, "headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "not an HTTP/1.1 request")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpError(400, "malformed header")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(400, "chunked bodies are not accepted; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(400, "bad Content-Length") from None
    if length < 0 or length > max_body:
        raise HttpError(413, f"body larger than {max_body} bytes")
    body = await reader.readexactly(length) if length else b""
    return Request(parts[0].upper(), parts[1].split("?", 1)[0], headers, body)


def _encode(response: Response) -> bytes:
    body = json.dumps(response.body).encode()
    head = [f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Status')}"]
    head += ["Content-Type: application/json", f"Content-Length: {len(body)}", "Connection: close"]
    head += [f"{k}: {v}" for k, v in (response.headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class HttpServer:
    """Serves `handler` on host:port (port 0: any free port) until `stop`."""

    def __init__(self, handler: Handler, *, max_body: int, tls: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._max_body = max_body
        self._tls = tls
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve, host, port, ssl=self._tls, limit=MAX_HEADER_BYTES, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            try:
                request = await asyncio.wait_for(_read_request(reader, self._max_body), READ_TIMEOUT)
                response = await self._handler(request)
            except HttpError as exc:
                response = Response(exc.status, {"error": str(exc)})
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                return
            except Exception:
                log.exception("webhook handler failed")
                response = Response(500, {"error": "internal error"})
            writer.write(_encode(response))
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.drain()
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
