"""`effectgate mcp --http` (a real child) advertises only what exists: its protected-resource
metadata names no authorization server unless one is configured, and a request without a token
(or with a forged one) is a 401 that says what to send."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from effectgate.mcp.http import WHAT_TO_SEND
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import ACME_TOKEN, RunningGateway, running_gateway
from tests.mcp_transports import http_front_door


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


async def test_metadata_names_no_authorization_server_it_does_not_serve(gw: RunningGateway) -> None:
    async with http_front_door(gw) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")
        for token in ("", "forged-token"):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
            assert refused.status_code == 401
            challenge = refused.headers["www-authenticate"]
            assert challenge.startswith("Bearer ") and WHAT_TO_SEND in challenge
            assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
            assert refused.json()["error_description"] == WHAT_TO_SEND
        metadata = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        assert metadata.status_code == 200
        assert metadata.json() == {"resource": url, "bearer_methods_supported": ["header"]}
        # A real token passes the door (the initialize answer is the MCP server's).
        ok = await http.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            headers={"Authorization": f"Bearer {ACME_TOKEN}", "Accept": "application/json, text/event-stream"},
        )
        assert ok.status_code == 200, ok.text


async def test_a_configured_authorization_server_is_advertised(gw: RunningGateway) -> None:
    issuer = "https://auth.example.com/"
    async with http_front_door(gw, "--authorization-server", issuer) as url, httpx.AsyncClient() as http:
        base = url.removesuffix("/mcp")
        metadata = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        assert metadata.status_code == 200
        assert metadata.json()["authorization_servers"] == [issuer]
