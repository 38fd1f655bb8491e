"""Bad data answered as bad data, through a real gateway (port 0) on SQLite and on PostgreSQL,
with the Stripe simulator on loopback: NUL in any agent text field or operator note is
INVALID_ARGUMENT naming the field (the same on both stores, nothing stored or sent); an amount
past 2^62 and a charge past a filled 2^62 budget are BUDGET_EXCEEDED with the figures, a limit
grant included, never STORE_UNAVAILABLE; a budget whose currency keys differ only in case is
refused by `effectgate check` in one line naming both keys."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from effectgate.gateway.config import ConfigError, parse_config
from effectgate.gateway.model import MAX_COUNT
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.test_execute import refused, request
from tests.test_limits import charge, charged
from tests.test_replicas import CountingStripe
from tests.test_startup import base_toml, one_line_failure, write

NUL = "a\x00b"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/eg.db"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def sim() -> AsyncIterator[CountingStripe]:
    from tests.harness import API_KEY

    simulator = CountingStripe(api_key=API_KEY)
    await simulator.start()
    yield simulator
    await simulator.stop()


@pytest.fixture
async def gateway(store_url: str, sim: CountingStripe) -> AsyncIterator[Callable[..., Awaitable[LiveGateway]]]:
    started: list[LiveGateway] = []

    async def go(**tool: Any) -> LiveGateway:
        live = await start_gateway(config_doc(store_url, **stripe_tools(sim.base_url, **tool)))
        started.append(live)
        return live

    yield go
    for live in started:
        await live.close()


def _with_nul(field: str) -> pb.ExecuteRequest:
    req = request(run="run-nul")
    if field.startswith("context."):
        setattr(req.context, field.removeprefix("context."), NUL)
    elif field.startswith("payload."):
        payload = tools_pb2.ChargeCard(customer="cus_1", amount=100, currency="usd", payment_method="pm_card_visa")
        setattr(payload, field.removeprefix("payload."), NUL)
        req.payload.Pack(payload)
    else:
        setattr(req, field, NUL)
    return req


AGENT_FIELDS = [
    "context.run_id",
    "context.step_id",
    "context.parent_run_id",
    "context.agent",
    "scope",
    "tool_call_id",
    "payload.customer",
    "payload.description",
]


async def test_nul_in_every_agent_field_and_operator_note_is_invalid_argument(
    gateway: Callable[..., Awaitable[LiveGateway]], sim: CountingStripe
) -> None:
    live = await gateway(approval="required")
    for field in AGENT_FIELDS:
        code, found = await refused(live.stub.Execute(_with_nul(field), timeout=10))
        assert code is grpc.StatusCode.INVALID_ARGUMENT, field
        assert [v.field for v in found["BadRequest"].field_violations] == [field]
        assert "NUL" in found["BadRequest"].field_violations[0].description
    assert (await live.stub.ListActions(pb.ListActionsRequest(), timeout=10)).actions == []  # nothing stored
    waiting = (await live.stub.Execute(request(run="run-ok"), timeout=10)).action
    assert waiting.state == pb.EFFECT_STATE_AWAITING_APPROVAL
    act = waiting.action_id
    op = live.operator
    calls: dict[str, Awaitable[Any]] = {
        "Approve": op.Approve(pb.ApproveRequest(action_id=act, note=NUL), timeout=10),
        "Deny": op.Deny(pb.DenyRequest(action_id=act, note=NUL), timeout=10),
        "Reconcile": op.Reconcile(
            pb.ReconcileRequest(action_id=act, resolution=pb.EFFECT_STATE_REJECTED, note=NUL), timeout=10
        ),
        "GrantBypass": op.GrantBypass(pb.GrantBypassRequest(action_id=act, note=NUL), timeout=10),
        "GrantLimit": op.GrantLimit(pb.GrantLimitRequest(action_id=act, note=NUL), timeout=10),
        "Reconcile.external_id": op.Reconcile(
            pb.ReconcileRequest(action_id=act, resolution=pb.EFFECT_STATE_REJECTED, note="x", external_id=NUL),
            timeout=10,
        ),
    }
    for name, call in calls.items():
        code, found = await refused(call)
        assert code is grpc.StatusCode.INVALID_ARGUMENT, name
        want = "external_id" if name.endswith("external_id") else "note"
        assert [v.field for v in found["BadRequest"].field_violations] == [want], name
    still = await live.stub.GetAction(pb.GetActionRequest(action_id=act), timeout=10)
    assert still.state == pb.EFFECT_STATE_AWAITING_APPROVAL and list(still.approved_by) == []
    history = await live.stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=act), timeout=10)
    assert all("\x00" not in e.note for e in history.events)
    assert charged(sim) == 0


async def test_amounts_and_sums_past_2_62_are_budget_exceeded_with_the_figures(
    gateway: Callable[..., Awaitable[LiveGateway]], sim: CountingStripe
) -> None:
    live = await gateway(limits={"run_budget": {"eur": MAX_COUNT}})
    # An amount no budget holds (2^63 - 1, the largest int64): refused before anything is stored.
    code, found = await refused(live.stub.Execute(charge("run-big", (1 << 63) - 1), timeout=10))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    info = found["ErrorInfo"]
    assert info.reason == "BUDGET_EXCEEDED" and info.metadata["limit"] == "max_count"
    assert info.metadata["amount"] == str((1 << 63) - 1) and info.metadata["max_count"] == str(MAX_COUNT)
    # The 2^62 budget, filled by one charge; the next one, even granted, cannot pass 2^62.
    filled = await live.stub.Execute(charge("run-full", MAX_COUNT, step="fill"), timeout=15)
    assert filled.action.state == pb.EFFECT_STATE_CONFIRMED
    code, found = await refused(live.stub.Execute(charge("run-full", MAX_COUNT, step="more"), timeout=10))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and found["ErrorInfo"].metadata["limit"] == "run_budget"
    action_id = found["ErrorInfo"].metadata["action_id"]
    await live.operator.GrantLimit(pb.GrantLimitRequest(action_id=action_id, note="month end"), timeout=10)
    code, found = await refused(live.stub.Execute(charge("run-full", MAX_COUNT, step="more"), timeout=10))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, found
    info = found["ErrorInfo"]
    assert info.reason == "BUDGET_EXCEEDED" and info.metadata["limit"] == "max_count"
    assert info.metadata["spent"] == str(MAX_COUNT) and "RetryInfo" not in found
    # A negative amount would give budget back: refused as a bad field.
    code, found = await refused(live.stub.Execute(charge("run-neg", -5), timeout=10))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in found["BadRequest"].field_violations] == ["payload.amount"]
    assert charged(sim) == MAX_COUNT  # the one charge that fit


def test_check_refuses_currency_keys_that_differ_only_in_case(tmp_path: Path) -> None:
    text = base_toml(tmp_path, tail="[tools.charge_card.limits]\nbudget = { usd = 500, USD = 10000 }\n")
    done = subprocess.run(
        [sys.executable, "-m", "effectgate.gateway", "check", "--config", str(write(tmp_path, text))],
        capture_output=True,
        text=True,
        timeout=90,
    )
    line = one_line_failure(done, "[tools.charge_card.limits] budget", "'usd' and 'USD' are one currency")
    assert line.startswith("effectgate: effectgate.toml: ")


def test_config_refuses_a_cap_past_2_62(tmp_path: Path) -> None:
    limits = {"run_budget": {"eur": MAX_COUNT + 1}}
    with pytest.raises(ConfigError) as caught:
        parse_config(config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools("http://127.0.0.1:9", limits=limits)))
    assert "\n" not in str(caught.value) and f"between 0 and {MAX_COUNT}" in str(caught.value)
    parse_config(
        config_doc(
            f"sqlite:///{tmp_path}/eg.db",
            **stripe_tools("http://127.0.0.1:9", limits={"run_budget": {"eur": MAX_COUNT}}),
        )
    )
