"""The MCP front door's streamable HTTP listener: loopback by default, another address only with
TLS (bearer tokens cross it), and over TLS the `mcp` SDK's own client calls a tool through it."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from effectgate.mcp import run_meta
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.agent_gateway import ACME_TOKEN, RunningGateway, running_gateway
from tests.mcp_transports import CLI, http_front_door
from tests.tls_certs import make_pki

CHARGE: dict[str, Any] = {"customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[RunningGateway]:
    async with running_gateway(tmp_path, sim) as running:
        yield running


def front_door(gw: RunningGateway, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [*CLI, "--config", str(gw.config), "--target", gw.target, "--http", "--port", "0", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_off_loopback_without_tls_is_refused_in_one_line(gw: RunningGateway) -> None:
    # Refused before anything is bound: no listener on any other address is ever opened here.
    done = front_door(gw, "--host", "0.0.0.0")
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--host 0.0.0.0 is not loopback" in lines[0] and "--cert-file" in lines[0], lines


def test_a_certificate_without_its_key_is_refused_in_one_line(gw: RunningGateway, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    done = front_door(gw, "--cert-file", str(pki.server_cert))
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done
    assert "--cert-file and --key-file go together" in done.stderr


async def test_over_tls_the_sdk_client_charges_once(gw: RunningGateway, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    tls = ("--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key))
    headers = {"Authorization": f"Bearer {ACME_TOKEN}"}
    async with http_front_door(gw, *tls) as url:
        assert url.startswith("https://127.0.0.1:"), url
        async with (
            httpx2.AsyncClient(headers=headers, verify=ssl.create_default_context(cafile=str(pki.ca))) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            meta = run_meta("run-mcp-tls", "charge-deposit", scope="order:tls")
            first = await client.call_tool("charge_card", CHARGE, meta=meta)
            again = await client.call_tool("charge_card", CHARGE, meta=meta)
        async with httpx2.AsyncClient() as untrusting:  # the system's CAs do not know our test CA
            with pytest.raises(httpx2.ConnectError):
                await untrusting.get(url)
    assert not first.is_error and not again.is_error
    assert first.structured_content is not None and again.structured_content is not None
    assert len(gw.effects()) == 1
