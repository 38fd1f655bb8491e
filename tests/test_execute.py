"""The core promise through a real gateway (grpc.aio on port 0, generated client) in front of
the Stripe simulator: one logical action, one effect, whatever the agent and the network do."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools

CHARGE = tools_pb2.ChargeCard(customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_visa")


def gateway_doc(tmp_path: Path, sim: StripeSimulator, **tool: Any) -> dict[str, Any]:
    return config_doc(f"sqlite:///{tmp_path}/eg.db", **stripe_tools(sim.base_url, **tool))


@pytest.fixture
async def gw(tmp_path: Path, sim: StripeSimulator) -> AsyncIterator[LiveGateway]:
    live = await start_gateway(gateway_doc(tmp_path, sim))
    yield live
    await live.close()


def request(
    run: str = "run-1",
    step: str = "charge",
    scope: str = "order:1093",
    payload: Any = CHARGE,
    call: str = "c1",
) -> pb.ExecuteRequest:
    packed = any_pb2.Any()
    packed.Pack(payload)
    return pb.ExecuteRequest(
        context=pb.RunContext(run_id=run, step_id=step),
        tool="charge_card",
        scope=scope,
        payload=packed,
        tool_call_id=call,
    )


def effects(sim: StripeSimulator) -> list[dict[str, Any]]:
    return [e for e in sim.ledger if e["kind"] == "payment_intent"]


def details(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "error carries no google.rpc.Status"
    found: dict[str, Any] = {}
    for detail in status.details:
        for kind in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, error_details_pb2.RetryInfo):
            if detail.Is(kind.DESCRIPTOR):
                message = kind()
                detail.Unpack(message)
                found[kind.DESCRIPTOR.name] = message
    return found


async def refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, dict[str, Any]]:
    """The code and google.rpc details of the error that `call` must end in."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), details(caught.value)


async def test_five_tool_call_ids_make_one_effect(gw: LiveGateway, sim: StripeSimulator) -> None:
    answers = [await gw.stub.Execute(request(call=f"call-{i}")) for i in range(5)]
    assert len(effects(sim)) == 1
    first = answers[0]
    assert first.action.state == pb.EFFECT_STATE_CONFIRMED and not first.replayed
    assert first.action.receipt.external_id.startswith("pi_")
    for answer in answers[1:]:
        assert answer.replayed
        assert answer.action.action_id == first.action.action_id
        assert answer.action.receipt == first.action.receipt
    assert first.action.tool_call_id == "call-0"  # recorded for tracing only


async def test_twenty_concurrent_executes_make_one_effect(gw: LiveGateway, sim: StripeSimulator) -> None:
    sim.latency = 0.3  # keep the first call in flight while the others arrive
    answers = await asyncio.gather(*(gw.stub.Execute(request(call=f"c{i}")) for i in range(20)))
    assert len(effects(sim)) == 1
    assert {a.action.action_id for a in answers} == {answers[0].action.action_id}
    assert {a.action.state for a in answers} == {pb.EFFECT_STATE_CONFIRMED}
    assert {a.action.receipt.external_id for a in answers} == {answers[0].action.receipt.external_id}
    assert sum(not a.replayed for a in answers) == 1


@pytest.mark.parametrize("fault", ["drop_after_commit", "error_after_commit"])
async def test_failure_after_commit_is_verified_not_repeated(gw: LiveGateway, sim: StripeSimulator, fault: str) -> None:
    sim.injector.script([fault])
    answer = await gw.stub.Execute(request())
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    assert len(effects(sim)) == 1
    assert answer.action.receipt.external_id == effects(sim)[0]["id"]


async def test_search_lag_longer_than_first_verification_makes_no_second_effect(
    tmp_path: Path, sim: StripeSimulator
) -> None:
    sim.search_lag = 2.5  # the first read-back (and the consistency window) see nothing
    sim.injector.script(["error_after_commit", "error_after_commit", "error_after_commit"])
    live = await start_gateway(gateway_doc(tmp_path, sim, consistency_window="4s"))
    try:
        answer = await live.stub.Execute(request())
        # Same-key sends (each answered with the stored 500), then read-backs inside the window
        # until search shows the intent at 2.5 s, well within the 10 s deadline.
        assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
        assert len(effects(sim)) == 1
        assert answer.action.receipt.external_id == effects(sim)[0]["id"]
    finally:
        await live.close()


async def test_same_key_other_amount_is_refused(gw: LiveGateway, sim: StripeSimulator) -> None:
    await gw.stub.Execute(request())
    other = tools_pb2.ChargeCard(customer="cus_42", amount=2000, currency="usd", payment_method="pm_card_visa")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Execute(request(payload=other, call="c2"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = details(caught.value)["ErrorInfo"]
    assert info.reason == "PAYLOAD_MISMATCH"
    assert info.metadata["stored_fingerprint"] != info.metadata["fingerprint"]
    assert len(effects(sim)) == 1


async def test_normalised_payload_is_the_same_action(gw: LiveGateway, sim: StripeSimulator) -> None:
    first = await gw.stub.Execute(request())
    shouted = tools_pb2.ChargeCard(customer=" cus_42 ", amount=1000, currency="USD", payment_method="pm_card_visa")
    again = await gw.stub.Execute(request(payload=shouted, call="c2"))
    assert again.replayed and again.action.fingerprint == first.action.fingerprint
    assert len(effects(sim)) == 1


async def test_declined_card_is_rejected_and_cached(gw: LiveGateway, sim: StripeSimulator) -> None:
    declined = tools_pb2.ChargeCard(
        customer="cus_42", amount=1000, currency="usd", payment_method="pm_card_chargeDeclined"
    )
    first = await gw.stub.Execute(request(payload=declined))
    assert first.action.state == pb.EFFECT_STATE_REJECTED
    assert "card_declined" in first.action.reason
    calls = sim.request_count
    again = await gw.stub.Execute(request(payload=declined, call="c2"))
    assert again.replayed and again.action.state == pb.EFFECT_STATE_REJECTED
    assert sim.request_count == calls, "a replay must not call the provider"
    assert effects(sim) == []


async def test_store_that_cannot_be_written_fails_closed(tmp_path: Path, sim: StripeSimulator) -> None:
    doc = gateway_doc(tmp_path, sim)
    doc["store"]["url"] += "?busy_timeout_ms=200"
    live = await start_gateway(doc)
    blocker = sqlite3.connect(tmp_path / "eg.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request())
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert details(caught.value)["ErrorInfo"].reason == "STORE_UNAVAILABLE"
        assert "RetryInfo" in details(caught.value)
        assert sim.request_count == 0 and effects(sim) == []
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await live.close()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.ClearField("context"), "context"),
        (lambda r: setattr(r.context, "step_id", ""), "context.step_id"),
        (lambda r: setattr(r.context, "run_id", "  "), "context.run_id"),
        (lambda r: setattr(r, "tool", "launch_rockets"), "tool"),
        (lambda r: r.payload.Pack(tools_pb2.SendEmail(to="a@b.c")), "payload"),
        (lambda r: r.ClearField("payload"), "payload"),
        (
            lambda r: r.payload.Pack(tools_pb2.ChargeCard(customer="c", amount=-5, currency="usd")),
            "payload.amount",
        ),
    ],
)
async def test_invalid_requests_get_field_violations(
    gw: LiveGateway, sim: StripeSimulator, mutate: Any, field: str
) -> None:
    bad = request()
    mutate(bad)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Execute(bad)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = details(caught.value)["BadRequest"].field_violations
    assert field in [v.field for v in violations]
    assert sim.request_count == 0


async def test_action_id_ignores_tool_call_id_and_payload(gw: LiveGateway) -> None:
    a = await gw.stub.Execute(request(call="x"))
    other = tools_pb2.ChargeCard(customer="cus_42", amount=5, currency="eur", payment_method="pm_card_visa")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Execute(request(call="y", payload=other))
    assert details(caught.value)["ErrorInfo"].metadata["action_id"] == a.action.action_id
    b = await gw.stub.Execute(request(step="another-step"))
    c = await gw.stub.Execute(request(scope="order:1094"))
    assert len({a.action.action_id, b.action.action_id, c.action.action_id}) == 3


async def test_deadline_exceeded_then_retry_is_one_effect(gw: LiveGateway, sim: StripeSimulator) -> None:
    sim.latency = 1.0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Execute(request(), timeout=0.3)
    # The call to the provider goes on past the caller's deadline; the caller is told in time.
    assert caught.value.code() == grpc.StatusCode.ABORTED
    found = details(caught.value)
    assert found["ErrorInfo"].reason == "IN_FLIGHT" and "RetryInfo" in found
    answer = await gw.stub.Execute(request(call="retry"), timeout=10)
    assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
    assert len(effects(sim)) == 1


async def test_second_caller_past_its_deadline_gets_in_flight(gw: LiveGateway, sim: StripeSimulator) -> None:
    sim.latency = 1.5
    first = asyncio.ensure_future(gw.stub.Execute(request(call="a")))
    await asyncio.sleep(0.3)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Execute(request(call="b"), timeout=0.6)
    # A waiting duplicate answers half its budget before its deadline: always ABORTED/IN_FLIGHT.
    assert caught.value.code() == grpc.StatusCode.ABORTED
    found = details(caught.value)
    assert found["ErrorInfo"].reason == "IN_FLIGHT" and "RetryInfo" in found
    assert (await first).action.state == pb.EFFECT_STATE_CONFIRMED
    assert len(effects(sim)) == 1


async def test_refuse_policy_answers_already_exists(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await start_gateway(gateway_doc(tmp_path, sim, on_repeat="refuse"))
    try:
        first = await live.stub.Execute(request())
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.Execute(request(call="c2"))
        assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
        status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
        assert status is not None
        stored = [pb.Action() for d in status.details if d.Is(pb.Action.DESCRIPTOR)]
        assert stored and status.details[-1].Unpack(stored[0])
        assert stored[0].receipt.external_id == first.action.receipt.external_id
        assert len(effects(sim)) == 1
    finally:
        await live.close()


async def test_list_and_get_actions(gw: LiveGateway) -> None:
    for i in range(5):
        await gw.stub.Execute(request(step=f"s{i}"))
    page = await gw.stub.ListActions(pb.ListActionsRequest(run_id="run-1", page_size=2))
    seen = [a.action_id for a in page.actions]
    while page.next_page_token:
        page = await gw.stub.ListActions(
            pb.ListActionsRequest(run_id="run-1", page_size=2, page_token=page.next_page_token)
        )
        seen += [a.action_id for a in page.actions]
    assert len(seen) == len(set(seen)) == 5
    confirmed = await gw.stub.ListActions(pb.ListActionsRequest(state=pb.EFFECT_STATE_CONFIRMED))
    assert len(confirmed.actions) == 5
    got = await gw.stub.GetAction(pb.GetActionRequest(action_id=seen[0]))
    assert got.action_id == seen[0]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.GetAction(pb.GetActionRequest(action_id="act_missing"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.ListActions(pb.ListActionsRequest(page_token="garbage"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_verify_rpc_reads_back_without_dispatching(gw: LiveGateway, sim: StripeSimulator) -> None:
    done = await gw.stub.Execute(request())
    await asyncio.sleep(0.4)  # past the simulator's search lag
    by_id = await gw.stub.Verify(pb.VerifyRequest(action_id=done.action.action_id))
    assert by_id.observation.outcome == pb.OBSERVATION_OUTCOME_CONFIRMED
    by_ref = await gw.stub.Verify(
        pb.VerifyRequest(
            ref=pb.ActionRef(
                context=pb.RunContext(run_id="run-1", step_id="charge"),
                tool="charge_card",
                scope="order:1093",
            )
        )
    )
    assert by_ref.action.action_id == done.action.action_id
    assert len(effects(sim)) == 1


async def test_allow_policy_records_every_call(tmp_path: Path, sim: StripeSimulator) -> None:
    """`on_repeat = "allow"` is for harmless effects: no dedup, but every call is still recorded."""
    live = await start_gateway(gateway_doc(tmp_path, sim, on_repeat="allow"))
    try:
        first = await live.stub.Execute(request(call="a"))
        second = await live.stub.Execute(request(call="b"))
        assert first.action.action_id != second.action.action_id
        assert not first.replayed and not second.replayed
        assert len(effects(sim)) == 2
        listed = await live.stub.ListActions(pb.ListActionsRequest(run_id="run-1"))
        assert len(listed.actions) == 2
    finally:
        await live.close()


async def test_coalesce_mismatch_answers_the_stored_outcome(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await start_gateway(gateway_doc(tmp_path, sim, on_mismatch="coalesce"))
    try:
        first = await live.stub.Execute(request())
        other = tools_pb2.ChargeCard(customer="cus_42", amount=9999, currency="usd", payment_method="pm_card_visa")
        again = await live.stub.Execute(request(payload=other, call="c2"))
        assert again.replayed and again.action.fingerprint == first.action.fingerprint
        assert again.action.receipt == first.action.receipt
        assert len(effects(sim)) == 1
    finally:
        await live.close()
