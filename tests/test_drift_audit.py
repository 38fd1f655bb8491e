"""The drift audit (docs/webhooks.md) against the Stripe and Square simulators: a charge created
directly at the simulator (around the gateway) is `untracked`, a gateway CONFIRMED whose provider
object was removed is `missing`, an effect whose amount differs from its action's payload is a
`mismatch`; `effectgate audit` prints them (JSON and summary) from a real process, and the
background job reports them in its gauge. The first `audit` is a `python -m effectgate.gateway`
process of its own, the others forks of one process that loaded the command line once
(tests/cli_forks.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

import httpx
import yaml

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.client import run, step
from effectgate.gateway.background import drift_job
from effectgate.gateway.core import BoundTool
from effectgate.gateway.observability import provider_metrics
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.chaos.config_writer import dump_config
from effectgate_lab.simulators.square_sim import SquareSimulator
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.cli_forks import CliForks
from tests.harness import LiveGateway, start_gateway
from tests.test_provider_switch import EXAMPLE, config


async def charge(live: LiveGateway, tool: str, order: str) -> pb.Action:
    with run(f"audit-{order}"), step("charge"):
        payload = ChargeCard(customer="cus_42", amount=1999, currency="eur", payment_method="pm_card_visa")
        return (await live.client.execute(tool, payload, scope=order, timeout=10)).action


async def around_the_gateway(stripe: StripeSimulator, amount: int, metadata: dict[str, str] | None = None) -> str:
    form = {"customer": "cus_42", "amount": str(amount), "currency": "eur", "payment_method": "pm_card_visa"}
    form["confirm"] = "true"
    for key, value in (metadata or {}).items():
        form[f"metadata[{key}]"] = value
    async with httpx.AsyncClient(base_url=stripe.base_url) as http:
        answer = await http.post("/v1/payment_intents", data=form, headers={"Authorization": "Bearer sk_test_switch"})
    answer.raise_for_status()
    return str(answer.json()["id"])


async def run_cli(config_path: Path, *args: str) -> tuple[int, str, str]:
    """`effectgate audit` in a real process (the simulators keep serving from this loop)."""
    command = [sys.executable, "-m", "effectgate.gateway", "audit", "--config", str(config_path), *args]
    proc = await asyncio.create_subprocess_exec(*command, stdout=PIPE, stderr=PIPE, env=os.environ.copy())
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def forked_cli(forks: CliForks, config_path: Path, *args: str) -> tuple[int, str, str]:
    """As run_cli, in a fork (on a thread: the simulators keep serving from this loop)."""
    done = await asyncio.to_thread(forks.run, "audit", "--config", str(config_path), *args)
    return done.returncode, done.stdout, done.stderr


async def test_the_audit_finds_what_went_around_the_gateway(tmp_path: Path, forks: CliForks) -> None:
    assert EXAMPLE.exists()
    os.environ["STRIPE_API_KEY"] = "sk_test_switch"
    os.environ["SQUARE_ACCESS_TOKEN"] = "EAAA_test_switch"
    async with (
        StripeSimulator(api_key="sk_test_switch") as stripe,
        SquareSimulator(access_token="EAAA_test_switch") as square,
    ):
        assert isinstance(stripe, StripeSimulator) and isinstance(square, SquareSimulator)
        doc: dict[str, Any] = config(tmp_path, stripe, square, "stripe")
        doc["tools"]["charge_square"] = {"adapter": "square"}
        live = await start_gateway(doc)
        try:
            kept = await charge(live, "charge_card", "order:1")
            removed = await charge(live, "charge_card", "order:2")
            on_square = await charge(live, "charge_square", "order:3")
            assert {a.state for a in (kept, removed, on_square)} == {pb.EFFECT_STATE_CONFIRMED}
            gone_square = await charge(live, "charge_square", "order:4")
            direct = await around_the_gateway(stripe, 4200)
            wrong = await around_the_gateway(stripe, 5, {ACTION_METADATA_KEY: kept.action_id})
            stripe.remove(removed.receipt.external_id)
            square.remove(gone_square.receipt.external_id)
            adapters = live.gateway.adapters
            tools = {name: BoundTool(t, adapters[t.adapter]) for name, t in live.gateway.config.tools.items()}
            job = drift_job(live.gateway.store, tools, adapters, ["dev"], interval=60, lookback=3600, clock=time.time)
            await job.run()
        finally:
            await live.close()
        assert provider_metrics._drift == {"untracked": 1, "missing": 2, "mismatch": 1}
        path = tmp_path / "effectgate.toml"
        path.write_text(dump_config(doc))
        code, out, err = await run_cli(path, "--since", "1h", "-o", "json")
        assert code == 1, err
        report = json.loads(out)
        found = {(f["kind"], f["adapter"], f["object_id"] or f["action_id"]) for f in report["findings"]}
        assert found == {
            ("untracked", "stripe", direct),
            ("mismatch", "stripe", wrong),
            ("missing", "stripe", removed.receipt.external_id),
            ("missing", "square", gone_square.receipt.external_id),
        }
        assert report["counts"] == {"untracked": 1, "missing": 2, "mismatch": 1}
        code, summary, _ = await forked_cli(forks, path, "--since", "1h")
        assert code == 1 and "1 untracked, 2 missing, 1 mismatch" in summary, summary
        assert "in the last 1h:" in summary, "--since as given"
        rows = [line.split() for line in summary.splitlines()[1:]]
        assert rows[0][:2] == ["FINDING", "ADAPTER"] and ["untracked", "stripe", direct, "-", "-"] in rows, rows
        code, wide, _ = await forked_cli(forks, path, "--since", "1h", "-o", "wide")
        assert code == 1 and "DETAIL" in wide and "'provider': 5" in wide, wide
        code, as_yaml, _ = await forked_cli(forks, path, "--since", "1h", "-o", "yaml")
        assert code == 1 and yaml.safe_load(as_yaml)["counts"] == report["counts"]
        assert len(stripe.ledger) == 4 and len(square.ledger) == 2  # effects counted at the simulators


async def test_actions_are_audited_under_the_adapter_that_sent_them(tmp_path: Path, forks: CliForks) -> None:
    """Stripe charges, then the tool moved to Square by config: the charges sent through Stripe are
    still Stripe's (no `missing` at Square, no `untracked` at Stripe)."""
    os.environ["STRIPE_API_KEY"] = "sk_test_switch"
    os.environ["SQUARE_ACCESS_TOKEN"] = "EAAA_test_switch"
    async with (
        StripeSimulator(api_key="sk_test_switch") as stripe,
        SquareSimulator(access_token="EAAA_test_switch") as square,
    ):
        assert isinstance(stripe, StripeSimulator) and isinstance(square, SquareSimulator)
        before = config(tmp_path, stripe, square, "stripe")
        live = await start_gateway(before)
        try:
            sent = [await charge(live, "charge_card", f"order:{n}") for n in (1, 2)]
        finally:
            await live.close()
        assert {a.state for a in sent} == {pb.EFFECT_STATE_CONFIRMED}
        path = tmp_path / "effectgate.toml"
        path.write_text(dump_config(config(tmp_path, stripe, square, "square")))  # the switch
        code, out, err = await forked_cli(forks, path, "--since", "24h", "-o", "json")
        assert code == 0, (out, err)
        report = json.loads(out)
        assert report["counts"] == {"untracked": 0, "missing": 0, "mismatch": 0}, report["findings"]
        assert report["effects"] == 2 and report["actions"] == 2
