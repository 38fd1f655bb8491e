"""The MCP front door dials a TLS (and mTLS) gateway with the Python client's settings
(EFFECTGATE_TLS_CA, _CERT, _KEY, _SERVER_NAME), over stdio as a real `effectgate mcp` child; a CA
that does not sign the gateway's certificate is a permanent tool error, not "call again later"."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime import Gateway
from effectgate.mcp import run_meta
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.mcp_transports import CLI
from tests.tls_certs import Pki, make_pki

TOKEN = "mcp-tls-agent-token"
CHARGE: dict[str, Any] = {"customer": "cus_42", "amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other-ca"))


async def _gateway(tmp_path: Path, sim: StripeSimulator, ca: Pki, *, mutual: bool) -> tuple[Gateway, Path]:
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        **stripe_tools(sim.base_url),
        principals=[{"name": "bot", "tenant": "acme", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}],
    )
    doc["server"]["tls"] = {"cert_file": str(ca.server_cert), "key_file": str(ca.server_key)}
    if mutual:
        doc["server"]["tls"]["client_ca_file"] = str(ca.ca)
    config = tmp_path / "effectgate.toml"
    tools = "\n".join(f'[tools.{n}]\nadapter = "stripe"\n' for n in doc["tools"])
    config.write_text(f'[adapters.stripe]\napi_base = "{sim.base_url}"\n{tools}')
    return await Gateway.start(parse_config(doc)), config


@pytest.fixture(params=["tls", "mtls"])
async def tls_gateway(
    request: pytest.FixtureRequest, tmp_path: Path, sim: StripeSimulator, ca: Pki
) -> AsyncIterator[tuple[str, Path, dict[str, str]]]:
    mutual = request.param == "mtls"
    gateway, config = await _gateway(tmp_path, sim, ca, mutual=mutual)
    env = {"EFFECTGATE_TLS_CA": str(ca.ca), "EFFECTGATE_TLS_SERVER_NAME": "localhost"}
    if mutual:
        env |= {"EFFECTGATE_TLS_CERT": str(ca.client_cert), "EFFECTGATE_TLS_KEY": str(ca.client_key)}
    try:
        yield f"127.0.0.1:{gateway.port}", config, env
    finally:
        await gateway.stop()


async def _call(target: str, config: Path, env: dict[str, str], run: str) -> Any:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_TLS")}
    params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "--config", str(config), "--target", target],
        env={**clean, **env, "EFFECTGATE_TOKEN": TOKEN},
    )
    async with Client(params) as client:
        return await client.call_tool("charge_card", CHARGE, meta=run_meta(run, "charge", scope="order:7"))


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def test_the_front_door_dials_a_tls_gateway_with_the_clients_settings(
    tls_gateway: tuple[str, Path, dict[str, str]],
) -> None:
    target, config, env = tls_gateway
    result = await _call(target, config, env, "run-tls-ok")
    assert not result.is_error, _text(result)
    assert result.structured_content["state"] == "CONFIRMED", result.structured_content


async def test_a_wrong_ca_is_a_permanent_configuration_error(
    tls_gateway: tuple[str, Path, dict[str, str]], other_ca: Pki
) -> None:
    target, config, env = tls_gateway
    result = await _call(target, config, env | {"EFFECTGATE_TLS_CA": str(other_ca.ca)}, "run-tls-wrong-ca")
    assert result.is_error
    error = result.structured_content["error"]
    assert error["reason"] == "GATEWAY_TLS_FAILED" and error["retry_same_step"] is False, error
    assert "configuration error" in _text(result) and "Do not retry" in _text(result)
    assert "call again" not in _text(result).lower()


async def test_an_unknown_token_is_permanent(tls_gateway: tuple[str, Path, dict[str, str]]) -> None:
    target, config, env = tls_gateway
    params_env = env | {"EFFECTGATE_TOKEN": "not-a-known-token"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_TLS")}
    params = StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "--config", str(config), "--target", target], env={**clean, **params_env}
    )
    async with Client(params) as client:
        result = await client.call_tool("charge_card", CHARGE, meta=run_meta("run-x", "charge", scope="order:8"))
    assert result.is_error and result.structured_content["error"]["retry_same_step"] is False
    assert "Do not retry" in _text(result)
