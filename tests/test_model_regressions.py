"""Plain regression tests for what the stateful model (tests/test_model_protocol.py) found, each
with the shrunk example it came from. One test per finding; a finding in an area another branch
owns is an `xfail(strict=True)` here until that branch fixes it (the marker then fails, and goes)."""

from __future__ import annotations

import time

import pytest

from effectgate.adapters.stripe.adapter import StripeAdapter
from effectgate.client import PolicyConflict, RunContext
from effectgate.testing import FakeClock, gateway
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.model.calls import payload

KEY = "sk_test_effectgate_regression"


async def test_a_bypass_is_not_confirmed_by_the_first_charge() -> None:
    """Shrunk: first(charge) -> grant_bypass -> fault_on_the_next_call(conflict) ->
    execute_with_bypass: the second generation's send is refused 409 (no effect), its read-back
    finds the *first* generation's PaymentIntent and answers CONFIRMED naming it: a false success
    for the second charge the operator granted (the provider holds one charge, not two)."""
    async with StripeSimulator(api_key=KEY) as sim:
        assert isinstance(sim, StripeSimulator)
        adapter = StripeAdapter("stripe", api_key=KEY, api_base=sim.base_url, consistency_window=1.0)
        tools = {"charge": {"adapter": "stripe", "bypass": "operator", "consistency_window": "1s"}}
        async with gateway(adapters={"stripe": adapter}, tools=tools, clock=FakeClock(time.time())) as gw:
            context = RunContext(run_id="run-bypass", step_id="charge")
            first = await gw.client.execute("charge", payload(500), scope="o1", context=context, timeout=10)
            assert first.action.state == pb.EFFECT_STATE_CONFIRMED
            await gw.client.grant_bypass(first.action.action_id, note="the customer asked for a second one")
            sim.injector.script(["conflict"])  # the second generation's first send: 409, no effect
            second = await gw.client.execute(
                "charge", payload(500), scope="o1", context=context, timeout=10, bypass=True
            )
            intents = [e["id"] for e in sim.ledger if e["kind"] == "payment_intent"]
            if second.action.state == pb.EFFECT_STATE_CONFIRMED:
                assert len(intents) == 2, f"CONFIRMED with {len(intents)} charge(s) at the provider"
                assert second.action.receipt.external_id == intents[1], "confirmed by the first charge"
            assert second.action.receipt.external_id != first.action.receipt.external_id


async def test_an_approval_after_the_ttl_is_refused_and_the_action_expires() -> None:
    """Shrunk: first(charge_approved) -> advance_the_clock(700) -> approve(op1) -> approve(op2):
    both approvals were accepted 100 s after the 600 s approval_ttl had passed (the expiry job had
    not run yet), and the action was sent. Now the late click is refused NOT_AWAITING_APPROVAL,
    the action expires at once, and nothing reaches the provider."""
    async with StripeSimulator(api_key=KEY) as sim:
        adapter = StripeAdapter("stripe", api_key=KEY, api_base=sim.base_url, consistency_window=1.0)
        tools = {"charge": {"adapter": "stripe", "approval": "required", "approval_ttl": "600s"}}
        # The expiry job would look only an hour later: the refusal must not depend on it.
        settings = {"reconcile_interval": "3600s"}
        clock = FakeClock(time.time())
        async with gateway(adapters={"stripe": adapter}, tools=tools, clock=clock, settings=settings) as gw:
            context = RunContext(run_id="run-late", step_id="charge")
            waiting = await gw.client.execute("charge", payload(700), scope="o2", context=context, timeout=10)
            assert waiting.action.state == pb.EFFECT_STATE_AWAITING_APPROVAL
            clock.advance(700)
            with pytest.raises(PolicyConflict) as refused:
                await gw.client.approve(waiting.action.action_id, note="late")
            assert refused.value.reason == "NOT_AWAITING_APPROVAL"
            assert "approval_ttl has passed" in refused.value.message
            after = await gw.client.get(waiting.action.action_id)
            assert after.state == pb.EFFECT_STATE_REJECTED and "expired" in after.reason
            again = await gw.client.execute("charge", payload(700), scope="o2", context=context, timeout=10)
            assert again.action.state == pb.EFFECT_STATE_REJECTED
            assert [e for e in sim.ledger if e["kind"] == "payment_intent"] == []


async def test_an_approval_within_the_ttl_still_sends() -> None:
    """The other side of the line: 599 s into a 600 s TTL the approval counts and the charge goes."""
    async with StripeSimulator(api_key=KEY) as sim:
        adapter = StripeAdapter("stripe", api_key=KEY, api_base=sim.base_url, consistency_window=1.0)
        tools = {"charge": {"adapter": "stripe", "approval": "required", "approval_ttl": "600s"}}
        clock = FakeClock(time.time())
        async with gateway(adapters={"stripe": adapter}, tools=tools, clock=clock) as gw:
            context = RunContext(run_id="run-in-time", step_id="charge")
            waiting = await gw.client.execute("charge", payload(700), scope="o3", context=context, timeout=10)
            clock.advance(599)
            approved = await gw.client.approve(waiting.action.action_id, note="in time")
            assert approved.state == pb.EFFECT_STATE_PLANNED
            sent = await gw.client.execute("charge", payload(700), scope="o3", context=context, timeout=10)
            assert sent.action.state == pb.EFFECT_STATE_CONFIRMED
            assert len([e for e in sim.ledger if e["kind"] == "payment_intent"]) == 1


async def test_the_reconciler_does_not_send_for_ever_when_every_send_is_ambiguous() -> None:
    """Shrunk (make fuzz, both stores): execute_new(charge_once, pm_card_chargeDeclined) with
    error_after_commit -> grant_bypass x2 -> settle_everything: the declined intent is stored with
    a 500 the simulator (like Stripe) replays for its key. Every reconciler pass proved absence
    ("no payment moved money"), sent again with the key, got the stored 500, and parked: 9
    attempts and counting, never settled. Now a drive with no agent asking sends only what is
    left of the generation's max_attempts; the action rests in NOT_FOUND for its agent."""
    async with StripeSimulator(api_key=KEY) as sim:
        adapter = StripeAdapter("stripe", api_key=KEY, api_base=sim.base_url, consistency_window=1.0)
        tools = {"charge": {"adapter": "stripe", "max_attempts": 3}}  # keeps processing 60 s: parked UNKNOWN
        clock = FakeClock(time.time())
        settings = {"reconcile_interval": "3600s"}
        async with gateway(adapters={"stripe": adapter}, tools=tools, clock=clock, settings=settings) as gw:
            sim.injector.script(["error_after_commit"])
            context = RunContext(run_id="run-declined", step_id="charge")
            declined = payload(300, card="pm_card_chargeDeclined")
            first = await gw.client.execute("charge", declined, scope="o4", context=context, timeout=10)
            action_id = first.action.action_id
            assert first.action.state == pb.EFFECT_STATE_UNKNOWN  # the answer was a 500 after the decline
            jobs = gw.server.background.jobs
            for _ in range(6):  # each pass is past the windows: absence is provable every time
                clock.advance(120)
                await jobs["reconciler"].run()
                close = jobs["reconciler"].close
                assert close is not None
                await close()
            rested = await gw.client.get(action_id)
            assert rested.state == pb.EFFECT_STATE_NOT_FOUND, rested.reason
            assert rested.attempts <= 3, f"{rested.attempts} sends for a max_attempts of 3"
            assert [e for e in sim.ledger if e["kind"] == "payment_intent"] == []  # declined: no money moved
