"""TLS and mTLS with a test CA: the async and sync clients and every CLI command, with settings
from arguments or from EFFECTGATE_TARGET / EFFECTGATE_TOKEN / EFFECTGATE_TLS_*; CLI output
neutralises control characters."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from effectgate.client import EffectGateClient, State, SyncEffectGateClient, Unavailable, run, step
from effectgate.gateway.config import parse_config
from effectgate.gateway.runtime.server import Gateway
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import config_doc, stripe_tools
from tests.tls_certs import Pki, make_pki

CHARGE = ChargeCard(customer="cus_7", amount=700, currency="eur", payment_method="pm_card_visa")
TOKEN = "op-and-agent-token"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("ca"))


async def start(tmp_path: Path, sim: StripeSimulator, ca: Pki, *, mutual: bool) -> Gateway:
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        **stripe_tools(sim.base_url, approval="required", bypass="operator"),
        principals=[
            {
                "name": "ops",
                "tenant": "acme",
                "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                "roles": ["agent", "operator"],
            }
        ],
    )
    tls = {"cert_file": str(ca.server_cert), "key_file": str(ca.server_key)}
    if mutual:
        tls["client_ca_file"] = str(ca.ca)
    doc["server"]["tls"] = tls
    return await Gateway.start(parse_config(doc))


@pytest.fixture
async def tls_gateway(tmp_path: Path, sim: StripeSimulator, ca: Pki) -> AsyncIterator[str]:
    gateway = await start(tmp_path, sim, ca, mutual=False)
    yield f"127.0.0.1:{gateway.port}"
    await gateway.stop()


@pytest.fixture
async def mtls_gateway(tmp_path: Path, sim: StripeSimulator, ca: Pki) -> AsyncIterator[str]:
    gateway = await start(tmp_path, sim, ca, mutual=True)
    yield f"127.0.0.1:{gateway.port}"
    await gateway.stop()


async def test_tls_async_with_arguments(tls_gateway: str, ca: Pki) -> None:
    async with EffectGateClient(tls_gateway, token=TOKEN, ca_file=str(ca.ca)) as client:
        with run("run-tls"), step("charge"):
            answer = await client.execute("charge_card", CHARGE, scope="order:1")
    assert answer.action.state == State.AWAITING_APPROVAL
    async with EffectGateClient(tls_gateway, token=TOKEN, tls=False, timeout=5) as plain:
        with pytest.raises(Unavailable):
            await plain.get(answer.action.action_id)


async def test_tls_sync_from_environment(tls_gateway: str, ca: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EFFECTGATE_TARGET", tls_gateway)
    monkeypatch.setenv("EFFECTGATE_TOKEN", TOKEN)
    monkeypatch.setenv("EFFECTGATE_TLS_CA", str(ca.ca))

    def agent() -> int:
        with SyncEffectGateClient() as client, run("run-env"), step("charge"):
            return client.execute("charge_card", CHARGE, scope="order:2").action.state

    assert await asyncio.to_thread(agent) == State.AWAITING_APPROVAL


async def test_mtls_needs_a_client_certificate(mtls_gateway: str, ca: Pki) -> None:
    with_cert = EffectGateClient(
        mtls_gateway, token=TOKEN, ca_file=str(ca.ca), cert_file=str(ca.client_cert), key_file=str(ca.client_key)
    )
    async with with_cert as client:
        with run("run-mtls"), step("charge"):
            answer = await client.execute("charge_card", CHARGE, scope="order:3")
        assert answer.action.state == State.AWAITING_APPROVAL
        approved = await client.approve(answer.action.action_id, note="mTLS operator")
        assert approved.state in (State.PLANNED, State.DISPATCHED, State.CONFIRMED)
    async with EffectGateClient(mtls_gateway, token=TOKEN, ca_file=str(ca.ca), timeout=5) as no_cert:
        with pytest.raises(Unavailable):
            await no_cert.get(answer.action.action_id)


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("EFFECTGATE_")} | env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_every_cli_command_over_mtls(mtls_gateway: str, ca: Pki) -> None:
    async with EffectGateClient(
        mtls_gateway, token=TOKEN, ca_file=str(ca.ca), cert_file=str(ca.client_cert), key_file=str(ca.client_key)
    ) as client:
        with run("run-cli"), step("charge"):
            hostile = "order:4\x1b[2J\x1b[31mPAID\r\u202e"
            action_id = (await client.execute("charge_card", CHARGE, scope=hostile)).action.action_id
    flags = ["--tls-cert", str(ca.client_cert), "--tls-key", str(ca.client_key)]
    env = {"EFFECTGATE_TARGET": mtls_gateway, "EFFECTGATE_TOKEN": TOKEN, "EFFECTGATE_TLS_CA": str(ca.ca)}
    code, out, err = await cli("actions", "--state", "AWAITING_APPROVAL", *flags, env=env)
    assert code == 0, err
    assert action_id in out and "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "order:4\\x1b[2J\\x1b[31mPAID\\r\\u202e" in out
    code, out, _ = await cli("show", action_id, "--json", *flags, env=env)
    assert code == 0 and "\x1b" not in out and json.loads(out)["scope"] == hostile
    code, out, err = await cli("approve", action_id, "--note", "checked", *flags, env=env)
    assert code == 0 and action_id in out, err
    for _ in range(100):  # the approved action is driven by the reconciler
        code, out, _ = await cli("show", action_id, *flags, env=env)
        if "CONFIRMED" in out:
            break
        await asyncio.sleep(0.2)
    assert "CONFIRMED" in out
    code, out, err = await cli("verify", action_id, *flags, env=env)
    assert code == 0 and "CONFIRMED" in out, err
    code, _, err = await cli("grant-bypass", action_id, "--note", "second charge asked", *flags, env=env)
    assert code == 0, err
    code, _, err = await cli(
        "reconcile", action_id, "--resolution", "CONFIRMED", "--note", "n", "--target", mtls_gateway,
        "--tls-ca", str(ca.ca), *flags, env={"EFFECTGATE_TOKEN": TOKEN},
    )  # fmt: skip
    # Only an UNKNOWN action can be reconciled: the answer is a typed, one-line refusal.
    assert code == 1 and "FAILED_PRECONDITION" in err and "Traceback" not in err
    code, _, err = await cli("show", action_id, env=env)  # no client certificate
    assert code == 1 and "UNAVAILABLE" in err
