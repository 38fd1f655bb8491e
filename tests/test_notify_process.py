"""Notifications survive a kill -9 of a real `effectgate serve` between the event and its
delivery: the event's row was committed with the action, so the gateway started after it
delivers the notification, once (killed before the send) or again under the same webhook-id
(killed after the send, before the outbox forgot it: the receiver dedups on the id).
`effectgate notify pending|failed|retry` reads and mends the outbox."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from standardwebhooks import Webhook

from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import GatewayProcess, config_doc, stripe_tools
from tests.notify_kit import SECRET, Receiver, webhook_sink
from tests.test_crash_recovery import charge_request
from tests.test_telemetry_metrics import by, scrape_until

ENV = {"EG_NOTIFY_SECRET": SECRET}


def notify_config(
    tmp_path: Path, sim: StripeSimulator, receiver: Receiver, metrics: bool = False, **sink: object
) -> Path:
    doc = config_doc(
        f"sqlite:///{tmp_path}/eg.db",
        gateway={"notify_interval": "0.2s"},
        **stripe_tools(sim.base_url, approval="required"),
    )
    doc["notify"] = [webhook_sink(receiver.url, **sink)]
    if metrics:  # on a port of its own choosing, announced (GatewayProcess.metrics_port)
        doc["telemetry"] = {"prometheus_listen": "127.0.0.1:0"}
    return write_config(doc, tmp_path / "effectgate.toml")


async def execute_waiting(target: str, run: str) -> str:
    async with grpc.aio.insecure_channel(target) as channel:
        answer = await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(charge_request(run), timeout=10)
    assert answer.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
    return str(answer.action.action_id)


async def notify_cli(config: Path, *args: str) -> str:
    """`effectgate notify ...` in a child, awaited (the receiver on this loop keeps answering)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", "notify", *args, "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **ENV},
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0, err.decode()
    return out.decode()


async def until_cli(
    config: Path, verb: str, check: Callable[[list[dict[str, Any]]], bool], what: str
) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while True:
        rows: list[dict[str, Any]] = json.loads(await notify_cli(config, verb, "-o", "json"))
        if check(rows):
            return rows
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}: {rows}")
        await asyncio.sleep(0.2)


# The deliverer killed at either point, then restarted on the same outbox, is the simulator's
# (tests/sim/notices.py: every notification checked, nothing left pending once settled); here
# the real sink's redelivery under the same webhook-id, after a kill past the send.
@pytest.mark.parametrize("point", ["after_notify"])
async def test_a_kill_between_the_event_and_its_delivery_delivers_after_the_restart(
    tmp_path: Path, sim: StripeSimulator, point: str
) -> None:
    receiver = await Receiver().start()
    config = notify_config(tmp_path, sim, receiver)
    doomed = GatewayProcess(config, crash_at=point, env=ENV)
    try:
        await doomed.ready()
        action = await execute_waiting(doomed.target, "run-kill")  # Execute answers: nothing waits on the sink
        assert await doomed.wait_exit() == -signal.SIGKILL  # the deliverer died at `point`
    finally:
        doomed.kill()
    assert len(receiver.received) == (1 if point == "after_notify" else 0)
    survivor = GatewayProcess(config, env=ENV)
    try:
        await survivor.ready()
        expected = 2 if point == "after_notify" else 1
        await receiver.until(lambda got: len(got) >= expected, "the delivery after the restart")
        await until_cli(config, "pending", lambda rows: rows == [], "an empty outbox")
    finally:
        assert await survivor.stop() == 0
        await receiver.stop()
    docs = [Webhook(SECRET).verify(r.body, r.headers) for r in receiver.received]
    assert len(docs) == expected  # nothing invented, nothing lost
    assert {r.headers["webhook-id"] for r in receiver.received} == {docs[0]["data"]["event_id"]}  # one id: dedup
    assert docs[0]["type"] == "approval_waiting" and docs[0]["data"]["action_id"] == action


async def test_failed_notifications_are_listed_counted_and_sent_again_by_the_cli(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    receiver = Receiver(status=503)
    await receiver.start()
    config = notify_config(tmp_path, sim, receiver, metrics=True, max_attempts=2)
    gateway = GatewayProcess(config, env=ENV)
    try:
        await gateway.ready()
        metrics = await gateway.metrics_port()
        await execute_waiting(gateway.target, "run-failed")
        rows = await until_cli(config, "failed", bool, "a failed notification")
        assert rows[0]["attempts"] == 2 and rows[0]["last_error"] == "HTTP 503" and rows[0]["sink"] == "ops-hook"
        assert receiver.received == []
        # Prometheus: one retry, then failed; the outbox gauge by status.
        samples = await scrape_until(
            metrics, lambda s: by(s, "effectgate_notify_outbox", "status").get(("failed",)) == 1, "the failed gauge"
        )
        outcomes = by(samples, "effectgate_notify_deliveries_total", "sink", "outcome")
        assert outcomes == {("ops-hook", "retry"): 1, ("ops-hook", "failed"): 1}
        receiver.status = 200
        assert "1 failed notification(s) due again" in await notify_cli(config, "retry", "--sink", "ops-hook")
        await receiver.until(lambda got: len(got) >= 1, "the notification sent again")
        again = Webhook(SECRET).verify(receiver.received[0].body, receiver.received[0].headers)
        assert again["data"]["event_id"] == rows[0]["event_id"]
        samples = await scrape_until(
            metrics,
            lambda s: (
                by(s, "effectgate_notify_deliveries_total", "outcome").get(("delivered",)) == 1
                and by(s, "effectgate_notify_outbox", "status") == {("failed",): 0, ("pending",): 0}
            ),
            "the delivery counted and the outbox empty",
        )
        assert by(samples, "effectgate_notify_latency_seconds_count", "sink") == {("ops-hook",): 1}
    finally:
        assert await gateway.stop() == 0
        await receiver.stop()
