"""Streamable HTTP on loopback, as an OAuth 2.0 protected resource: every request needs a bearer
token the gateway accepts (checked by asking the gateway), else 401 with a `WWW-Authenticate`
header pointing at the protected-resource metadata. The token is forwarded to the gateway on
each call, so the gateway's tenants, roles and allow-lists apply unchanged."""

from __future__ import annotations

import socket
import time
from typing import Any

import uvicorn
from pydantic import AnyHttpUrl
from starlette.applications import Starlette

from effectgate.mcp.gateway_port import GatewayPort
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel import Server

PATH = "/mcp"


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


def build_app(server: Server[Any], gateway: GatewayPort, *, base_url: str, authorization_server: str = "") -> Starlette:
    resource = f"{base_url}{PATH}"
    auth = AuthSettings(
        issuer_url=AnyHttpUrl(authorization_server or base_url),
        resource_server_url=AnyHttpUrl(resource),
        validate_token_resource=False,  # effectgate bearer tokens are not audience-bound
    )
    return server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        host="127.0.0.1",
        auth=auth,
        token_verifier=GatewayTokenVerifier(gateway),
    )


def bind_loopback(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve_http(server: Server[Any], gateway: GatewayPort, *, port: int, authorization_server: str = "") -> None:
    sock = bind_loopback(port)
    actual = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{actual}"
    app = build_app(server, gateway, base_url=base_url, authorization_server=authorization_server)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    # Supervisors and tests read this line to learn the address (port 0 picks a free one).
    print(f"effectgate mcp listening on {base_url}{PATH}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])
