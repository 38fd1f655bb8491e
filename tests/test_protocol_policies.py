"""Per-tool policies, refusals before acting (rate limits) and operator verbs, in-process and in
virtual time (effectgate.testing)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from effectgate.adapters.base import AmbiguousError, DefinitiveError, NoEffectError, RateLimited
from effectgate.gateway.config.schema import Approval, Bypass, OnMismatch, OnRepeat
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.operators.operator import LEASE_PATIENCE
from effectgate.gateway.core.protocol.replay_cache import ReplayCache
from effectgate.gateway.model.domain import NextStep, State
from effectgate.gateway.model.errors import (
    ActionNotFound,
    AlreadyExecuted,
    InFlight,
    InvalidRequest,
    PayloadMismatch,
    PolicyConflict,
    ProviderRateLimited,
)
from effectgate.gateway.model.keys import provider_key
from effectgate.testing import Rig, ScriptedAdapter, command, rig
from effectgate.testing.clock import FakeClock
from effectgate.tools.v1 import tools_pb2
from tests.test_transitions import base

ACTION = command().identity.action_id
OTHER = tools_pb2.ChargeCard(customer="cus_42", amount=2000, currency="usd", payment_method="pm_card_visa")


# -- rate limits and other refusals before acting ----------------------------------------------------


async def test_retry_after_is_honoured_then_confirmed_with_one_effect() -> None:
    r = await rig()
    r.adapter.script_execute(RateLimited("429", retry_after=2.0), RateLimited("429", retry_after=2.0))
    result = await r.execute()
    assert result.record.state is State.CONFIRMED and result.record.attempts == 3
    sent = r.adapter.executed_at
    assert len(sent) == 3 and sent[1] - sent[0] >= 2.0 and sent[2] - sent[1] >= 2.0
    assert len(r.adapter.effects) == 1
    assert {c.provider_key for c in r.adapter.executed} == {provider_key(ACTION, 0)}


async def test_retry_after_past_the_deadline_answers_rate_limited_and_the_next_execute_sends() -> None:
    r = await rig()
    r.adapter.script_execute(RateLimited("503", retry_after=60.0))
    with pytest.raises(ProviderRateLimited) as caught:
        await r.execute(budget=10.0)
    assert caught.value.retry_after == 60.0 and caught.value.reason == "PROVIDER_RATE_LIMITED"
    stored = r.stored(ACTION)
    assert stored.state is State.NOT_FOUND and stored.next_step is NextStep.DISPATCH
    assert stored.lease_owner == "" and len(r.adapter.executed) == 1
    assert r.clock.slept == []  # no pointless wait, no burst
    assert stored.next_check_at == pytest.approx(r.clock() + 60.0)
    assert await r.reconciler.run_once() == 0  # proven absence waits for the agent
    # Before the pause has passed, no worker sends: the answer is the same refusal.
    r.clock.advance(20.0)
    with pytest.raises(ProviderRateLimited) as early:
        await r.execute(command(call="early"), budget=10.0)
    assert early.value.retry_after == pytest.approx(40.0) and len(r.adapter.executed) == 1
    r.clock.advance(40.0)
    again = await r.execute(command(call="later"))
    assert again.record.state is State.CONFIRMED and not again.replayed and again.record.attempts == 2
    assert len(r.adapter.effects) == 1


async def test_plain_refusals_back_off_and_end_not_found() -> None:
    r = await rig(max_attempts=3)
    r.adapter.script_execute(*(NoEffectError("401 unauthorized") for _ in range(3)))
    record = (await r.execute()).record
    assert record.state is State.NOT_FOUND and record.attempts == 3
    assert record.reason == "provider refused before acting: 401 unauthorized"
    gaps = [b - a for a, b in zip(r.adapter.executed_at, r.adapter.executed_at[1:], strict=False)]
    assert gaps == [pytest.approx(0.2), pytest.approx(0.4)]
    assert r.adapter.effects == []


async def test_definitive_refusal_is_rejected_and_cached() -> None:
    r = await rig()
    r.adapter.script_execute(DefinitiveError("card declined", code="card_declined", details={"decline": "generic"}))
    first = (await r.execute()).record
    assert first.state is State.REJECTED and first.receipt is not None
    assert first.receipt.result == {"code": "card_declined", "error": "card declined", "decline": "generic"}
    again = await r.execute(command(call="again"))
    assert again.replayed and again.record == first and len(r.adapter.executed) == 1


async def test_no_time_to_send_claims_planned_and_leaves_it_to_the_reconciler() -> None:
    r = await rig()
    record = (await r.execute(budget=0.01)).record
    assert record.state is State.PLANNED and record.lease_owner == "" and r.adapter.executed == []
    assert await r.reconciler.run_once() == 1
    await r.reconciler.stop()
    assert r.stored(ACTION).state is State.CONFIRMED and len(r.adapter.effects) == 1


# -- repeat and mismatch policies ------------------------------------------------------------------


async def test_refuse_repeat_answers_already_executed() -> None:
    r = await rig(on_repeat=OnRepeat.REFUSE)
    first = (await r.execute()).record
    with pytest.raises(AlreadyExecuted) as caught:
        await r.execute(command(call="again"))
    assert caught.value.record == first


async def test_payload_mismatch_is_refused_or_coalesced() -> None:
    strict = await rig()
    await strict.execute()
    with pytest.raises(PayloadMismatch):
        await strict.execute(command(payload=OTHER))
    lenient = await rig(on_mismatch=OnMismatch.COALESCE)
    first = (await lenient.execute()).record
    again = await lenient.execute(command(payload=OTHER))
    assert again.replayed and again.record == first and len(lenient.adapter.effects) == 1


async def test_allow_records_every_call_as_its_own_action() -> None:
    r = await rig(on_repeat=OnRepeat.ALLOW)
    a, b = (await r.execute()).record, (await r.execute()).record
    assert a.action_id != b.action_id and len(r.adapter.effects) == 2
    assert r.db.calls["get"] == 0  # nothing to read first: every call is new


async def test_another_tenant_never_sees_the_action() -> None:
    r = await rig()
    await r.execute()
    with pytest.raises(ActionNotFound):
        await r.protocol.get("globex", ACTION)


async def test_invalid_payload_is_refused_before_anything_is_stored() -> None:
    r = await rig()
    with pytest.raises(InvalidRequest):
        await r.execute(command(payload=tools_pb2.SendEmail(to="a@b.c")))
    assert r.db.rows == {}


# -- approval ----------------------------------------------------------------------------------------


async def test_approval_then_dispatch_once() -> None:
    r = await rig(approval=Approval.REQUIRED)
    waiting = await r.execute()
    assert waiting.record.state is State.AWAITING_APPROVAL and r.adapter.executed == []
    assert (await r.execute(command(call="again"))).record.state is State.AWAITING_APPROVAL
    approved = await r.operations.approve("acme", ACTION, "ops", "fine")
    assert approved.state is State.PLANNED and approved.notes == ("approved by ops: fine",)
    assert await r.operations.approve("acme", ACTION, "ops", "twice") == approved
    result = await r.execute(command(call="after"))
    assert result.record.state is State.CONFIRMED and len(r.adapter.effects) == 1


# -- operators: reconcile and bypass -------------------------------------------------------------------


async def unknown_action(**kw: Any) -> Rig:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False, has_read_api=False)
    r = await rig(clock=clock, adapter=adapter, **kw)
    adapter.script_execute(AmbiguousError("reset"))  # nothing happened, but nobody can tell
    record = (await r.execute()).record
    assert record.state is State.UNKNOWN
    return r


async def test_operator_proves_absence_and_the_next_execute_sends() -> None:
    r = await unknown_action()
    with pytest.raises(InvalidRequest):
        await r.operations.reconcile("acme", ACTION, State.NOT_FOUND, "ops", "  ", "")
    with pytest.raises(InvalidRequest):
        await r.operations.reconcile("acme", ACTION, State.PLANNED, "ops", "why", "")
    absent = await r.operations.reconcile("acme", ACTION, State.NOT_FOUND, "ops", "not in the ledger", "")
    assert absent.state is State.NOT_FOUND and absent.next_step is NextStep.DISPATCH
    with pytest.raises(PolicyConflict):
        await r.operations.reconcile("acme", ACTION, State.CONFIRMED, "ops", "again", "")
    again = (await r.execute(command(call="resume"))).record
    assert again.state is State.CONFIRMED and again.attempts == 2 and len(r.adapter.effects) == 1


async def test_operator_confirms_with_an_external_id() -> None:
    r = await unknown_action()
    done = await r.operations.reconcile("acme", ACTION, State.CONFIRMED, "ops", "in dashboard", "ch_9")
    assert done.state is State.CONFIRMED and done.receipt is not None and done.receipt.external_id == "ch_9"
    replay = await r.execute(command(call="again"))
    assert replay.replayed and replay.record == done


async def test_a_reconcile_waits_for_another_replicas_read_back_then_settles() -> None:
    """An operator reconciles while another replica holds the lease (reading the UNKNOWN back):
    the reconcile waits for the lease instead of answering IN_FLIGHT to the operator."""
    r = await unknown_action()
    held = await r.store.acquire_lease(ACTION, "reading-back", r.clock(), 4.0)  # another replica's
    assert held is not None
    started = r.clock()
    done = await r.operations.reconcile("acme", ACTION, State.CONFIRMED, "ops", "in dashboard", "ch_9")
    assert done.state is State.CONFIRMED and done.receipt is not None and done.receipt.external_id == "ch_9"
    assert held.lease_expires_at <= r.clock() < started + LEASE_PATIENCE  # the holder's lease ran out


async def test_a_reconcile_answers_in_flight_when_the_holder_keeps_the_lease_past_the_patience() -> None:
    r = await unknown_action()
    held = await r.store.acquire_lease(ACTION, "stuck", r.clock(), 60.0)
    assert held is not None
    started = r.clock()
    with pytest.raises(InFlight):
        await r.operations.reconcile("acme", ACTION, State.CONFIRMED, "ops", "in dashboard", "ch_9")
    assert started + LEASE_PATIENCE <= r.clock() < held.lease_expires_at
    assert r.stored(ACTION).state is State.UNKNOWN and r.stored(ACTION).lease_owner == "stuck"


async def test_a_reconcile_that_waited_refuses_an_action_the_holder_settled() -> None:
    r = await unknown_action()
    other = await r.replica("reading-back")
    held = await other.protocol.try_lease(ACTION)
    assert held is not None
    reconcile = asyncio.ensure_future(
        r.operations.reconcile("acme", ACTION, State.NOT_FOUND, "ops", "not in the ledger", "")
    )
    await asyncio.sleep(0)  # it found the lease held and waits
    # The holder proves the effect (a read-back found it) and hands the lease back.
    await other.protocol.commit(held, t.Reconcile(resolution=State.CONFIRMED, who="ops2", note="seen", external_id="x"))
    with pytest.raises(PolicyConflict) as refused:
        await reconcile
    assert refused.value.reason == "NOT_UNKNOWN" and r.stored(ACTION).state is State.CONFIRMED


async def test_bypass_grant_and_use_make_a_new_generation() -> None:
    r = await rig(bypass=Bypass.OPERATOR)
    first = (await r.execute()).record
    with pytest.raises(PolicyConflict) as caught:
        await r.execute(command(bypass=True))
    assert caught.value.reason == "BYPASS_NOT_GRANTED"
    with pytest.raises(InvalidRequest):
        await r.operations.grant_bypass("acme", ACTION, "ops", "")
    granted = await r.operations.grant_bypass("acme", ACTION, "ops", "customer asked twice")
    assert granted.bypass_granted and len(r.cache) == 0  # the grant dropped the cached record
    assert (await r.execute(command(call="plain"))).replayed  # without bypass: the stored outcome
    second = await r.execute(command(bypass=True, call="bypass"))
    assert not second.replayed and second.record.generation == 1 and not second.record.bypass_granted
    assert len(r.adapter.effects) == 2 and second.record.receipt != first.receipt
    assert [c.provider_key for c in r.adapter.executed] == [provider_key(ACTION, 0), provider_key(ACTION, 1)]
    with pytest.raises(PolicyConflict):  # the grant was used up
        await r.execute(command(bypass=True, call="again"))


async def test_bypass_needs_the_tool_policy_and_a_settled_action() -> None:
    r = await rig()
    await r.execute()
    with pytest.raises(PolicyConflict) as caught:
        await r.operations.grant_bypass("acme", ACTION, "ops", "please")
    assert caught.value.reason == "BYPASS_NOT_ALLOWED"
    u = await unknown_action(bypass=Bypass.OPERATOR)
    with pytest.raises(PolicyConflict) as caught:
        await u.operations.grant_bypass("acme", ACTION, "ops", "please")
    assert caught.value.reason == "NOT_SETTLED"


async def test_a_bypass_grant_waits_for_a_held_lease_and_answers_in_flight_past_the_patience() -> None:
    """Like a reconcile, a grant meets the lease of the gateway's own work on the action (another
    replica's, here): it waits for a lease that ends within its patience and applies, and answers
    IN_FLIGHT, granting nothing, for one held longer."""
    r = await rig(bypass=Bypass.OPERATOR)
    await r.execute()
    held = await r.store.acquire_lease(ACTION, "writing-back", r.clock(), 4.0)
    assert held is not None
    started = r.clock()
    granted = await r.operations.grant_bypass("acme", ACTION, "ops", "customer asked twice")
    assert granted.bypass_granted and held.lease_expires_at <= r.clock() < started + LEASE_PATIENCE

    stuck = await rig(bypass=Bypass.OPERATOR)
    await stuck.execute()
    kept = await stuck.store.acquire_lease(ACTION, "stuck", stuck.clock(), 60.0)
    assert kept is not None
    started = stuck.clock()
    with pytest.raises(InFlight):
        await stuck.operations.grant_bypass("acme", ACTION, "ops", "customer asked twice")
    assert started + LEASE_PATIENCE <= stuck.clock() < kept.lease_expires_at
    assert not stuck.stored(ACTION).bypass_granted and stuck.stored(ACTION).lease_owner == "stuck"


# -- the settled cache ---------------------------------------------------------------------------------


def test_cache_is_bounded_and_keeps_only_settled_records() -> None:
    clock = FakeClock()
    cache = ReplayCache(capacity=2, ttl=5.0, clock=clock)
    records = [base(State.CONFIRMED, action_id=f"a{i}") for i in range(3)]
    for record in records:
        cache.put(record)
    assert len(cache) == 2 and cache.get("a0") is None and cache.get("a2") == records[2]
    cache.put(base(State.UNKNOWN, action_id="u"))
    cache.put(base(State.CONFIRMED, action_id="g", bypass_granted=True))
    assert cache.get("u") is None and cache.get("g") is None
    clock.advance(5.0)
    assert cache.get("a2") is None
    ReplayCache(capacity=0).put(records[0])


async def test_a_rate_limited_retry_over_an_attempt_in_doubt_is_not_absence() -> None:
    """Attempt 1 is lost (it may still land); the same-key retry gets a 429. The refusal proves
    nothing of attempt 1, so the action stays in doubt (its reservation held) until a read sent
    after absence_provable_at; only then is it sent again (issue 38)."""
    r = await rig(keeps_processing=2.0)
    r.adapter.script_execute(AmbiguousError("timeout"), RateLimited("429", retry_after=1.0))
    result = await r.execute()
    assert result.record.state is State.CONFIRMED and len(r.adapter.effects) == 1
    story = await r.store.history(ACTION)
    refused = [e for e in story if e.kind == "refused_before_acting"]
    assert [e.state for e in refused] == [State.DISPATCHED]
    # The provider's pause was honoured before the next same-key send.
    sent = r.adapter.executed_at
    assert len(sent) == 3 and sent[2] - sent[1] >= 1.0
