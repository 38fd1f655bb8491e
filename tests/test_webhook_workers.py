"""`effectgate serve --workers 2` with `[webhooks]`: the workers share the webhook port as they share
the gRPC port (the parent holds it with SO_REUSEPORT and claims it; docs/webhooks.md). Real
processes: the pool starts, signed deliveries sent over fresh connections (so the kernel may hand
them to either worker) are applied, one event delivered several times at once is applied once
across the workers (the shared store's claim of its id), a replay is refused, and a plain `serve`
or a second `--workers` parent on that webhook port is refused with the documented line. The test
asserts outcomes only, never which worker answered."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1.gateway_pb2_grpc import EffectGatewayStub
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from effectgate_lab.simulators.webhook_sender import WebhookSender
from tests.ports import closed_port
from tests.test_startup import base_toml, charge, one_line_failure, run_cli, write

SECRET_ENV = "EFFECTGATE_TEST_POOL_WEBHOOK_SECRET"
SECRET = "whsec_pool_of_workers"
SETTING = "[webhooks] listen"


def _config(tmp_path: Path, sim: StripeSimulator, webhooks: str) -> Path:
    adapter = f'webhook_secret_env = "{SECRET_ENV}"\nwebhook_tolerance = 300\n'
    text = base_toml(tmp_path, adapter=adapter).replace("http://127.0.0.1:9", sim.base_url)
    return write(tmp_path, text + f'[webhooks]\nlisten = "{webhooks}"\n')


def _spawn_workers(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "effectgate.gateway", "--log-level", "WARNING", "serve", "--config", str(config),
         "--workers", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip


async def _line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 90)


@pytest.mark.timeout(240)
async def test_workers_share_the_webhook_port_and_apply_each_event_once(
    tmp_path: Path, sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    parent = _spawn_workers(_config(tmp_path, sim, "127.0.0.1:0"))
    try:
        ready = await _line(parent)
        found = re.search(r"serving on port (\d+) \(2 workers\)", ready)
        assert found, ready
        hooks_line = await _line(parent)
        announced = re.fullmatch(r"effectgate webhooks on port (\d+)\n", hooks_line)
        assert announced, hooks_line
        port, hooks = int(found.group(1)), int(announced.group(1))
        # Confirmed charges, so that a refund event about each is a note in its history.
        actions = []
        for index in range(4):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                done = await EffectGatewayStub(channel).Execute(charge(index), timeout=30)
                assert done.action.state == pb.EFFECT_STATE_CONFIRMED
                actions.append(done.action)
        # The simulator only builds the events here; the test sends them (each POST its own connection).
        sim.webhooks.url = ""
        events = [sim.refund(a.receipt.external_id) for a in actions]
        sender = WebhookSender(url=f"http://127.0.0.1:{hooks}/webhooks/stripe", secret=SECRET)
        bodies = [json.dumps(e).encode() for e in events]
        # Different events at once: every one applied.
        pairs = list(zip(bodies, events, strict=True))
        answers = await asyncio.gather(*(sender.deliver(body, event["id"]) for body, event in pairs[1:]))
        assert [(d.status, d.answer.get("outcome")) for d in answers] == [(200, "noted")] * 3, answers
        # One event delivered six times at once: applied once, whichever workers got the copies;
        # the others are a replay (400) or meet the action's lease (503, the provider retries).
        copies = await asyncio.gather(*(sender.deliver(bodies[0], events[0]["id"]) for _ in range(6)))
        outcomes = sorted((d.status, d.answer.get("outcome") or d.answer.get("error")) for d in copies)
        assert outcomes.count((200, "noted")) == 1, outcomes
        assert set(outcomes) <= {(200, "noted"), (400, "replayed"), (503, "try again later")}, outcomes
        # Each retried later: a replay, refused, whichever worker gets it.
        for body, event in pairs:
            again = await sender.deliver(body, event["id"])
            assert (again.status, again.answer) == (400, {"error": "replayed"}), again
        for action in actions:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                got = await EffectGatewayStub(channel).GetAction(pb.GetActionRequest(action_id=action.action_id))
            refunds = [n for n in got.notes if n.startswith("refunded reported by stripe")]
            assert len(refunds) == 1, got.notes
            assert got.state == pb.EFFECT_STATE_CONFIRMED
        assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 4
        # A plain gateway (another store) cannot take the webhook port, nor can another parent.
        other = tmp_path / "other"
        other.mkdir()
        intruder = _config(other, sim, f"127.0.0.1:{hooks}")
        taken = f"cannot listen on 127.0.0.1:{hooks} ({SETTING}): Address already in use"
        one_line_failure(await asyncio.to_thread(run_cli, "serve", "--config", str(intruder)), taken)
        one_line_failure(
            await asyncio.to_thread(run_cli, "serve", "--config", str(intruder), "--workers", "2"),
            f"cannot listen on 127.0.0.1:{hooks} ({SETTING}): another `effectgate serve --workers` holds it",
        )
        parent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(parent.wait, 60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


@pytest.mark.timeout(120)
async def test_a_pool_refused_the_webhook_port_says_what_a_plain_serve_says(
    tmp_path: Path, sim: StripeSimulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    with closed_port() as held:  # bound by this test, never listened on
        config = _config(tmp_path, sim, f"127.0.0.1:{held}")
        plain = one_line_failure(await asyncio.to_thread(run_cli, "serve", "--config", str(config)))
        pool = one_line_failure(await asyncio.to_thread(run_cli, "serve", "--config", str(config), "--workers", "2"))
    assert plain == pool == f"effectgate: cannot listen on 127.0.0.1:{held} ({SETTING}): Address already in use"
