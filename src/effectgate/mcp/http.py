"""Streamable HTTP (on loopback, or on another address only with TLS), as an OAuth 2.0 protected
resource: every request needs a bearer token the gateway accepts (checked by asking the gateway),
else 401 with a `WWW-Authenticate` header pointing at the protected-resource metadata and saying
what to send. The token is forwarded to the gateway on each call, so the gateway's tenants, roles
and allow-lists apply unchanged.

The metadata (RFC 9728) names an authorization server only when one is configured
(`--authorization-server`): effectgate serves none itself, and advertising its own address as
one sent OAuth clients to a `/.well-known/oauth-authorization-server` that answers 404."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import time
from typing import Any

import uvicorn
from pydantic import AnyHttpUrl
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from effectgate.mcp.gateway_port import GatewayPort
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel import Server

PATH = "/mcp"
METADATA = "/.well-known/oauth-protected-resource"
WHAT_TO_SEND = "send Authorization: Bearer <token>, the token of an effectgate principal"


class GatewayTokenVerifier:
    """A token is valid when the gateway authenticates it; positive answers are cached briefly."""

    def __init__(self, gateway: GatewayPort, *, cache_seconds: float = 10.0) -> None:
        self.gateway = gateway
        self.cache_seconds = cache_seconds
        self._seen: dict[str, float] = {}

    async def verify_token(self, token: str) -> AccessToken | None:
        now = time.monotonic()
        if self._seen.get(token, 0.0) < now:
            if not await self.gateway.accepts(token):
                return None
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[token] = now + self.cache_seconds
        return AccessToken(token=token, client_id="effectgate-bearer", scopes=[])


class HonestAuth:
    """The SDK's auth routes, told the truth: without a configured authorization server the
    protected-resource metadata names none (the SDK's would name the issuer it was given), and a
    401 says in its `WWW-Authenticate` description and JSON body what to send."""

    def __init__(self, app: ASGIApp, *, resource: str, metadata_url: str, authorization_server: str) -> None:
        self.app = app
        self.resource = resource
        self.metadata_url = metadata_url
        self.authorization_server = authorization_server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith(METADATA) and not self.authorization_server:
            doc = {"resource": self.resource, "bearer_methods_supported": ["header"]}
            await _json(send, 200, doc, [])
            return
        refused: dict[str, int] = {}

        async def rewrite(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                refused["status"] = 401
                challenge = (
                    f'Bearer error="invalid_token", error_description="{WHAT_TO_SEND}", '
                    f'resource_metadata="{self.metadata_url}"'
                )
                await _json(
                    send,
                    401,
                    {"error": "invalid_token", "error_description": WHAT_TO_SEND},
                    [(b"www-authenticate", challenge.encode())],
                )
                return
            if refused:
                return  # the SDK's own 401 body: replaced above
            await send(message)

        await self.app(scope, receive, rewrite)


async def _json(send: Send, status: int, doc: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(doc).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def build_app(
    server: Server[Any], gateway: GatewayPort, *, base_url: str, authorization_server: str = "", host: str = "127.0.0.1"
) -> ASGIApp:
    resource = f"{base_url}{PATH}"
    auth = AuthSettings(
        # The SDK requires an issuer; without a configured one it is never advertised (HonestAuth).
        issuer_url=AnyHttpUrl(authorization_server or base_url),
        resource_server_url=AnyHttpUrl(resource),
        validate_token_resource=False,  # effectgate bearer tokens are not audience-bound
    )
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        host=host,
        auth=auth,
        token_verifier=GatewayTokenVerifier(gateway),
    )
    metadata_url = f"{base_url}{METADATA}{PATH}"
    return HonestAuth(app, resource=resource, metadata_url=metadata_url, authorization_server=authorization_server)


class HttpSettingsError(ValueError):
    """The HTTP listener's settings are unsafe or unusable (one line for the operator)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """The listener's TLS (None: plaintext); a pair that does not load is a settings error."""
    if not cert_file and not key_file:
        return None
    if not (cert_file and key_file):
        raise HttpSettingsError("--cert-file and --key-file go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise HttpSettingsError(f"--cert-file/--key-file: not a PEM certificate and its key ({exc})") from None
    return context


def bind(host: str, port: int, tls: ssl.SSLContext | None) -> socket.socket:
    """Loopback by default; any other address carries bearer tokens, so only with TLS."""
    if not is_loopback(host) and tls is None:
        raise HttpSettingsError(
            f"--host {host} is not loopback: bearer tokens would cross the network in the clear; "
            "give --cert-file and --key-file (or keep 127.0.0.1 behind a TLS proxy)"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise HttpSettingsError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_http(
    server: Server[Any],
    gateway: GatewayPort,
    *,
    port: int,
    authorization_server: str = "",
    host: str = "127.0.0.1",
    cert_file: str = "",
    key_file: str = "",
) -> None:
    tls = tls_context(cert_file, key_file)
    sock = bind(host, port, tls)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    base_url = f"{'https' if tls else 'http'}://{shown}:{actual}"
    app = build_app(server, gateway, base_url=base_url, authorization_server=authorization_server, host=host)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        ssl_certfile=cert_file or None,
        ssl_keyfile=key_file or None,
    )
    # Supervisors and tests read this line to learn the address (port 0 picks a free one).
    print(f"effectgate mcp listening on {base_url}{PATH}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])
