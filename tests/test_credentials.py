"""Credentials found wrong before the first call: `effectgate check --probe` makes one harmless
read per adapter (real simulators on loopback, a real `effectgate check` process), and a refusal
during work is a warning, a metric and a note in readiness, which stays on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from effectgate.adapters import AdapterError, CredentialsRefused
from effectgate.adapters.capabilities import ProbesCredentials
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1.gateway_pb2_grpc import EffectGatewayStub
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.adapter_targets import start_target
from tests.harness import API_KEY_ENV, config_doc, stripe_tools
from tests.serve_child import ServeChild, http_get, http_until
from tests.test_execute import request
from tests.test_startup import one_line_failure, run_cli, write

GOOD_KEY = "sk_test_probe_good_51c0"


def _config(tmp_path: Path, api_base: str) -> Path:
    return write(
        tmp_path,
        f"""
[server]
listen = "127.0.0.1:0"
[store]
url = "sqlite:///{tmp_path}/eg.db"
[adapters.stripe]
api_base = "{api_base}"
api_key_env = "EG_PROBE_STRIPE_KEY"
timeout = 5
[tools.charge_card]
adapter = "stripe"
""",
    )


async def test_check_probe_names_a_bad_stripe_key_in_one_line_and_passes_a_good_one(tmp_path: Path) -> None:
    async with StripeSimulator(api_key=GOOD_KEY) as sim:
        config = str(_config(tmp_path, sim.base_url))
        bad = await asyncio.to_thread(
            run_cli, "check", "--probe", "--config", config, env={"EG_PROBE_STRIPE_KEY": "sk_test_wrong_key_0000"}
        )
        line = one_line_failure(bad, "[adapters.stripe] probe failed", "authentication_failed")
        assert "sk_test_wrong" not in bad.stderr + bad.stdout  # Stripe echoes the key: never passed on
        assert bad.stdout == ""
        good = await asyncio.to_thread(
            run_cli, "check", "--probe", "--config", config, env={"EG_PROBE_STRIPE_KEY": GOOD_KEY}
        )
        assert good.returncode == 0, good.stderr
        assert "probe: [adapters.stripe]: OK: listed 1 payment intent" in good.stdout
        # Without --probe, check does not call the provider: a wrong key passes unseen.
        plain = await asyncio.to_thread(run_cli, "check", "--config", config, env={"EG_PROBE_STRIPE_KEY": "nope"})
        assert plain.returncode == 0, plain.stderr
        assert "probe:" not in plain.stdout
        # ... and says so, with the command that would have caught it.
        assert "credentials: not checked; `effectgate check --probe`" in plain.stdout
    assert line.endswith(
        "probe failed: list payment intents: refused (authentication_failed): the provider refused the key "
        'set by [adapters.stripe] api_key_env = "EG_PROBE_STRIPE_KEY"'
    ), line


@pytest.mark.parametrize("name", ["stripe", "square", "postmark", "smtp", "http:record_invoice"])
async def test_every_built_in_adapter_probes_its_credentials(name: str) -> None:
    target = await start_target(name)
    try:
        if name.startswith("http"):  # a probe_path as well as the verify read (test_http_probe.py)
            settings = target._settings
            target._settings = lambda: settings() | {"probe_path": "/invoices"}
        good = await target.build()
        assert isinstance(good, ProbesCredentials)
        try:
            assert "nothing checked" not in await good.probe()
        finally:
            await good.close()
        effects = await target.effects()
        wrong = await target.build(secret="wrong-secret-0000")
        assert isinstance(wrong, ProbesCredentials)
        # The SMTP simulator (aiosmtpd) answers aiosmtplib's second AUTH mechanism after a refused
        # first one with silence: the probe fails on the read timeout, which names the login phase.
        expected = AdapterError if name == "smtp" else CredentialsRefused
        try:
            with pytest.raises(expected) as refused:
                await wrong.probe()
            assert name != "smtp" or "login" in str(refused.value)
            assert "wrong-secret" not in str(refused.value)
        finally:
            await wrong.close()
        assert await target.effects() == effects  # a probe never makes an effect
    finally:
        await target.stop()


async def test_credentials_refused_at_work_are_a_warning_a_metric_and_a_note_in_readiness(tmp_path: Path) -> None:
    async with StripeSimulator(api_key=GOOD_KEY) as sim:
        doc = config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url))
        doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}  # the port it binds is announced
        # The harness's key (API_KEY_ENV) is not the simulator's: every call is refused with 401.
        child = await ServeChild.for_config(doc, tmp_path / "eg.toml").start()
        try:
            port = await child.ready()
            metrics = await child.metrics_port()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                answer = await EffectGatewayStub(channel).Execute(request(run="refused"), timeout=30)
            assert answer.action.state != pb.EFFECT_STATE_CONFIRMED, answer
            # The agent and the operator read which setting holds the refused key, never "retry later".
            said = answer.action.reason
            assert f'set by [adapters.stripe] api_key_env = "{API_KEY_ENV}"' in said, said
            assert "retry later" not in said and "an operator must fix it" in said
            text = (await http_get(metrics, "/metrics")).text
            assert 'effectgate_provider_auth_failures_total{adapter="stripe"' in text, text
            assert 'effectgate_provider_credentials_refused{adapter="stripe"' in text
            ready = await http_until(metrics, "/readyz", lambda r: "credentials" in r.text, "the note")
            assert ready.status_code == 200 and "credentials refused by [adapters.stripe]" in ready.text
            warnings = [line for line in child.stderr if "WARNING" in line and "refused the credentials" in line]
            assert warnings and "[adapters.stripe]" in warnings[0], child.transcript()
        finally:
            assert await child.stop() == 0
