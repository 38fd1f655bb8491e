"""A write that lands after the cut (issue 38), against the real simulators: the provider takes a
random 0.1-1.8 s to apply each create (it goes on after the connection closed), agents call with a
0.5 s deadline, the gateway's attempt_timeout is 1 s and the tools declare that the provider may
keep processing 2.5 s after the call ended (`keeps_processing`, see KEEPS). On the Stripe simulator (keys) and
the CRM simulator (no keys), on SQLite (one gateway) and on PostgreSQL (two replicas): no
NOT_FOUND is ever recorded while the provider holds the effect, no duplicate, and the limits'
counters equal what the provider applied. Plus a Verify inside the bound, and SIGTERM while a call
outlives its caller. A kill of the gateway mid-attempt, then the reconciler (which must wait for
the provider's bound before proving absence), is the simulator's (docs/testing.md, "Claims the
simulator carries").

The studies run `SLOW_CUT_ACTIONS` actions each (20 in the normal suite; `make soak` runs 100).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2, struct_pb2

from effectgate.adapters.stripe.adapter import ACTION_METADATA_KEY
from effectgate.gateway.model.keys import action_id
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1 import gateway_pb2_grpc
from effectgate_lab.chaos.config_writer import write_config
from effectgate_lab.simulators.server import JsonDict, SimulatorServer
from effectgate_lab.slow_cut import Figures, Plan, SlowCrm, SlowStripe, false_not_founds, overran, reason_of, study
from tests.adapter_targets import scenario
from tests.harness import API_KEY, GatewayProcess, config_doc, start_gateway, stripe_tools

ACTIONS = int(os.environ.get("SLOW_CUT_ACTIONS", "20"))
CUT, ATTEMPT, WINDOW = 0.5, 1.0, 0.5
# The tools' keeps_processing. Honest for these simulators: a write may be applied its whole
# processing time after the connection closed (a call can end right after its request arrived),
# and the simulators share this test's event loop, which lags under load (0.55 s seen in `make
# soak`: a 1.8 s write applied 2.35 s after it arrived). SLOW_CUT_KEEPS=1 shows what too short a
# bound costs (a false NOT_FOUND and a duplicate in 100 on two replicas).
KEEPS = float(os.environ.get("SLOW_CUT_KEEPS", "2.5"))
PROCESSING = (0.1, 1.8)  # around the cut (0.5 s) and the attempt (1 s)
PRICE = 1000
CAP = max(1, ACTIONS * 4 // 5)  # the limits bind: 80 % of the actions fit
CRM_KEY_ENV, CRM_KEY = "EFFECTGATE_TEST_SLOWCUT_CRM_KEY", "crm-slow-cut-key"
os.environ.setdefault(CRM_KEY_ENV, CRM_KEY)
RESULTS = os.environ.get("SLOW_CUT_RESULTS", "")

TIMING = {"attempt_timeout": f"{ATTEMPT:g}s", "keeps_processing": f"{KEEPS:g}s", "consistency_window": f"{WINDOW:g}s"}
GATEWAY = {"lease_ttl": "2s", "reconcile_interval": "0.2s", "recheck_min": "0.2s", "max_clock_skew": "1s"}


def charge(i: int) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(tools_pb2.ChargeCard(customer="cus_38", amount=PRICE, currency="eur", payment_method="pm_card_visa"))
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=f"run-{i}", step_id="pay"), tool="charge_card", scope="cut", payload=packed
    )


def invoice(i: int) -> pb.ExecuteRequest:
    body = struct_pb2.Struct()
    body.update({"id": f"inv_cut_{i}", "amount": PRICE, "currency": "usd"})
    packed = any_pb2.Any()
    packed.Pack(body)
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=f"run-{i}", step_id="bill"), tool="record_invoice", scope="cut", payload=packed
    )


def stripe_effect(entry: JsonDict) -> tuple[str, int]:
    if entry["kind"] != "payment_intent":
        return "", 0
    return str(entry["metadata"].get(ACTION_METADATA_KEY, "")), int(entry["params"]["amount"])


def invoice_action(i: int) -> str:
    return action_id("dev", f"run-{i}", "bill", "record_invoice", "cut")


def crm_effect(entry: JsonDict) -> tuple[str, int]:
    if entry["kind"] != "invoice":
        return "", 0
    return invoice_action(int(str(entry["params"]["id"]).removeprefix("inv_cut_"))), 0


class Provider:
    """One simulator and what the study needs to know of it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sim: SimulatorServer = (
            SlowStripe(api_key=API_KEY, search_lag=0.3) if kind == "stripe" else SlowCrm(api_key=CRM_KEY, read_lag=0.3)
        )
        self.request: Callable[[int], pb.ExecuteRequest] = charge if kind == "stripe" else invoice
        self.effect_of = stripe_effect if kind == "stripe" else crm_effect
        self.tool = "charge_card" if kind == "stripe" else "record_invoice"
        self.currency = "eur" if kind == "stripe" else ""

    def tables(self) -> dict[str, Any]:
        if self.kind == "stripe":
            limits = {"max_effects": CAP, "budget": {"eur": CAP * PRICE}, "window": "1d"}
            return stripe_tools(self.sim.base_url, deadline="10s", limits=limits, **TIMING)
        adapter = scenario("crm_invoice") | {"base_url": self.sim.base_url, "token_env": CRM_KEY_ENV, "timeout": 5}
        tool = {"adapter": "crm", "deadline": "10s", "limits": {"max_effects": CAP, "window": "1d"}, **TIMING}
        return {"adapters": {"crm": adapter}, "tools": {"record_invoice": tool}}


@pytest.fixture(params=["stripe", "crm"])
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    chosen = Provider(str(request.param))
    await chosen.sim.start()
    chosen.sim.write_delay = PROCESSING
    yield chosen
    await chosen.sim.stop()


def check(figures: Figures, provider: Provider, where: str) -> None:
    summary = figures.summary()
    if RESULTS:  # `make soak` collects the figures
        with open(RESULTS, "a") as out:
            out.write(json.dumps({**summary, "sim": provider.kind, "store": where}) + "\n")
    # The gateway's promise covers a provider that keeps its declared bound: a false NOT_FOUND or
    # a duplicate may only be of an action whose effect the (loaded) simulator applied later than
    # keeps_processing allows, and there is none unless the machine is badly overloaded.
    overran = set(figures.overran)
    assert {case["action"] for case in figures.false_cases} <= overran, summary
    assert set(figures.duplicated) <= overran, summary
    # The limits' counters are what the provider applied (less those overruns' second effects).
    price = PRICE if provider.kind == "stripe" else 0
    assert figures.gateway_effects == figures.provider_effects - figures.duplicates, summary
    assert figures.gateway_spend == figures.provider_spend - figures.duplicates * price, summary
    assert figures.gateway_effects <= CAP and figures.gateway_spend <= CAP * price, summary
    # Every action settles or is refused by the limits: none is lost or left in doubt.
    assert not figures.other, summary
    assert figures.confirmed == figures.gateway_effects, summary
    assert figures.confirmed + figures.limited == ACTIONS, summary


def plan() -> Plan:
    return Plan(n=ACTIONS, deadline=CUT, window=WINDOW, keeps_processing=KEEPS, patience=60.0 + ACTIONS * 0.6)


async def test_writes_around_the_cut_on_sqlite(tmp_path: Path, provider: Provider) -> None:
    live = await start_gateway(config_doc(f"sqlite:///{tmp_path}/eg.db", gateway=GATEWAY, **provider.tables()))
    try:
        figures = await study(
            [live.target],
            provider.sim,
            provider.request,
            provider.effect_of,
            plan(),
            tool=provider.tool,
            currency=provider.currency,
        )
    finally:
        await live.close()
    check(figures, provider, "sqlite")


# On two PostgreSQL replicas the suite runs the provider without keys (nothing at the provider
# masks a second send); `make soak` runs both for docs/protocol.md's table. The interleavings of
# late writes, replicas and limits are the simulator's (tests/sim: its provider applies a request
# up to `keeps_processing` after the call ended, and every NOT_FOUND is checked against its ledger).
@pytest.mark.postgres
@pytest.mark.parametrize("provider", ["stripe", "crm"] if RESULTS else ["crm"], indirect=True)
async def test_writes_around_the_cut_on_two_postgres_replicas(tmp_path: Path, pg_dsn: str, provider: Provider) -> None:
    config = write_config(config_doc(pg_dsn, gateway=GATEWAY, **provider.tables()), tmp_path / "effectgate.toml")
    replicas = [GatewayProcess(config), GatewayProcess(config)]
    try:
        await asyncio.gather(*(r.ready(timeout=60) for r in replicas))
        figures = await study(
            [r.target for r in replicas],
            provider.sim,
            provider.request,
            provider.effect_of,
            plan(),
            tool=provider.tool,
            currency=provider.currency,
        )
    finally:
        for replica in replicas:
            replica.kill()
    try:
        check(figures, provider, "postgres x2")
    except AssertionError as exc:  # what the replicas said, for the one who reads the failure
        said = ["".join(r.output[-30:]) for r in replicas]
        raise AssertionError(f"{exc}\nreplica output:\n" + "\n---\n".join(said)) from None


# -- one slow action: a Verify inside the bound ------------------------------------------------------

# One slow invoice. The caller's deadline is 2 s, so the gateway answers 1 s before it (the most
# `answer_by` keeps): the margin a loaded machine's event loop needs, which this test shares with
# the gateway and the simulator (0.5 s, a 0.25 s margin, was missed beside a second suite). The
# exact answer time is proved in virtual time (tests/test_caller_deadline.py).
SLOW_CUT, SLOW_ATTEMPT = 2.0, 2.5
SLOW = 3.5  # the provider applies the invoice 3.5 s after it arrived: past the attempt and the cut


async def story_states(stub: gateway_pb2_grpc.EffectGatewayAsyncStub, action: str) -> list[int]:
    story = await stub.GetActionHistory(pb.GetActionHistoryRequest(action_id=action), timeout=10)
    return [e.state for e in story.events]


async def until_state(
    stub: gateway_pb2_grpc.EffectGatewayAsyncStub, action: str, states: set[int], timeout: float
) -> pb.Action:
    async with asyncio.timeout(timeout):
        while True:
            with_ = await stub.GetAction(pb.GetActionRequest(action_id=action), timeout=5)
            if with_.state in states:
                return with_
            await asyncio.sleep(0.05)


def crm_tables(sim: SlowCrm, keeps: float, attempt: float) -> dict[str, Any]:
    adapter = scenario("crm_invoice") | {"base_url": sim.base_url, "token_env": CRM_KEY_ENV, "timeout": 5}
    tool = {
        "adapter": "crm",
        "deadline": "10s",
        **TIMING,
        "attempt_timeout": f"{attempt:g}s",
        "keeps_processing": f"{keeps:g}s",
    }
    return {"adapters": {"crm": adapter}, "tools": {"record_invoice": tool}}


async def test_the_caller_is_answered_at_its_deadline_and_verify_inside_the_bound_proves_nothing(
    tmp_path: Path,
) -> None:
    """The caller's 2 s deadline passes while the create is at the provider: it gets IN_FLIGHT
    with RetryInfo, the attempt runs its full 2.5 s, ends in doubt and is parked. An operator's
    Verify then reads nothing yet, and that is not recorded as NOT_FOUND; the provider applies
    the invoice, and the action is CONFIRMED with one effect."""
    sim = SlowCrm(api_key=CRM_KEY, read_lag=0.0)
    await sim.start()
    sim.latency = SLOW
    live = await start_gateway(
        config_doc(
            f"sqlite:///{tmp_path}/eg.db", gateway=GATEWAY | {"lease_ttl": "4s"}, **crm_tables(sim, SLOW, SLOW_ATTEMPT)
        )
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(invoice(1), timeout=SLOW_CUT)
        assert caught.value.code() == grpc.StatusCode.ABORTED, caught.value
        reason, retry_after = reason_of(caught.value)
        assert reason == "IN_FLIGHT" and 0 < retry_after <= SLOW_ATTEMPT
        action = invoice_action(1)
        parked = await until_state(live.stub, action, {pb.EFFECT_STATE_UNKNOWN, pb.EFFECT_STATE_CONFIRMED}, 20)
        verified = await live.stub.Verify(pb.VerifyRequest(action_id=action), timeout=10)
        assert verified.action.state != pb.EFFECT_STATE_NOT_FOUND, (parked, verified)
        done = await until_state(live.stub, action, {pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED}, 30)
        assert done.state == pb.EFFECT_STATE_CONFIRMED and done.attempts == 1
        assert pb.EFFECT_STATE_NOT_FOUND not in await story_states(live.stub, action)
        assert [e["params"]["id"] for e in sim.ledger] == ["inv_cut_1"]
    finally:
        await live.close()
        await sim.stop()


def test_a_not_found_is_false_when_a_request_sent_before_it_was_applied() -> None:
    # Requests arrived at 1.0 and 5.0; NOT_FOUND recorded at 0.5 (before any), 3.0 (after the
    # first: false) and 6.0 (after both: false).
    assert false_not_founds([0.5], [1.0, 5.0]) == 0
    assert false_not_founds([0.5, 3.0, 6.0], [1.0, 5.0]) == 2
    assert false_not_founds([3.0], []) == 0


def test_an_effect_applied_later_than_the_declared_bound_is_the_providers_overrun() -> None:
    # Arrived at 1.0; the call carrying it ended without an answer at 2.0; bound 1.5 s.
    assert not overran([{"arrived": 1.0, "at": 3.5}], [2.0], 1.5)
    assert overran([{"arrived": 1.0, "at": 3.6}], [2.0], 1.5)
    assert not overran([{"arrived": 1.0, "at": 9.0}], [], 1.5)  # answered: no call ended in doubt
    assert not overran([{"arrived": 3.0, "at": 4.0}], [2.0, 3.5], 1.5)  # its own call ended at 3.5


async def test_sigterm_while_the_call_outlives_its_caller(tmp_path: Path) -> None:
    """The caller was answered IN_FLIGHT and the call goes on when the gateway is told to stop:
    the drain waits for the drive (shutdown_grace), the process exits 0, and the action is settled
    with one charge — by the drain, or else by the next gateway's reconciler."""
    sim = SlowStripe(api_key=API_KEY, search_lag=0.3)
    await sim.start()
    sim.latency = 1.2
    try:
        tables = stripe_tools(sim.base_url, deadline="10s", **TIMING | {"attempt_timeout": "1.5s"})
        config = write_config(
            config_doc(f"sqlite:///{tmp_path}/eg.db", gateway=GATEWAY, **tables), tmp_path / "effectgate.toml"
        )
        gateway = GatewayProcess(config)
        await gateway.ready(timeout=60)
        async with grpc.aio.insecure_channel(gateway.target) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gateway_pb2_grpc.EffectGatewayStub(channel).Execute(charge(0), timeout=0.3)
        # IN_FLIGHT at the caller's deadline, or on a loaded machine the client's own deadline
        # first: either way the caller has gone and the call goes on (the answer itself is
        # test_the_caller_is_answered_at_its_deadline_and_verify_inside_the_bound_proves_nothing's).
        answered = (caught.value.code(), reason_of(caught.value)[0])
        assert answered in {(grpc.StatusCode.ABORTED, "IN_FLIGHT"), (grpc.StatusCode.DEADLINE_EXCEEDED, "")}
        assert await gateway.stop() == 0
        again = GatewayProcess(config)
        await again.ready(timeout=60)
        try:
            async with grpc.aio.insecure_channel(again.target) as channel:
                stub = gateway_pb2_grpc.EffectGatewayStub(channel)
                action = action_id("dev", "run-0", "pay", "charge_card", "cut")
                done = await until_state(stub, action, {pb.EFFECT_STATE_CONFIRMED, pb.EFFECT_STATE_REJECTED}, 30)
                assert done.state == pb.EFFECT_STATE_CONFIRMED
        finally:
            await again.stop()
        assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 1
    finally:
        await sim.stop()
