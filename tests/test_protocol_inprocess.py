"""The effect protocol in-process and in virtual time (effectgate.testing): the write path, replays,
single flight, lease loss, a store failing mid-flight, read-backs that hang or fail, and the
edges of the consistency window. Each test is exact: one outcome, counted effects and writes."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from effectgate.adapters.base import AmbiguousError, Observation
from effectgate.gateway.core import transitions as t
from effectgate.gateway.model.domain import ActionEvent, ActionRecord, NextStep, State
from effectgate.gateway.model.errors import GatewayUnavailable, InFlight
from effectgate.testing import CHARGE, Hang, Lost, ScriptedAdapter, command, rig
from effectgate.testing.clock import FakeClock

ACTION = command().identity.action_id


async def test_new_action_is_two_writes_and_one_effect() -> None:
    r = await rig()
    result = await r.execute()
    assert result.record.state is State.CONFIRMED and not result.replayed
    assert result.record.attempts == 1 and result.record.receipt is not None
    assert len(r.adapter.effects) == 1
    # One read (absent), the claim already DISPATCHED, the settle write: nothing else.
    assert dict(r.db.calls) == {"get": 1, "insert_if_absent": 1, "update": 1}
    assert r.stored(ACTION) == result.record
    assert result.record.lease_owner == "" and result.record.identity == command().identity


async def test_replay_is_answered_from_the_cache_without_io() -> None:
    r = await rig()
    first = await r.execute()
    before = dict(r.db.calls)
    again = await r.execute(command(call="call-2"))
    assert again.replayed and again.record == first.record
    assert dict(r.db.calls) == before  # no read, no write
    assert len(r.adapter.executed) == 1


async def test_replay_on_another_replica_is_one_read_and_no_write() -> None:
    r = await rig()
    first = await r.execute()
    other = await r.replica("worker-2")
    before = r.db.writes
    again = await other.execute(command(call="call-2"))
    assert again.replayed and again.record == first.record
    assert r.db.writes == before and r.db.calls["get"] == 2
    assert len(r.adapter.executed) == 1


async def test_cached_replay_expires_and_reads_through() -> None:
    r = await rig()
    await r.execute()
    r.clock.advance(r.cache.ttl + 1)
    reads = r.db.calls["get"]
    assert (await r.execute()).replayed
    assert r.db.calls["get"] == reads + 1


async def test_a_cache_hit_does_not_extend_the_entry() -> None:
    """The TTL bounds how long another replica's bypass can go unseen here, however often the
    action is replayed."""
    r = await rig()
    await r.execute()
    reads = r.db.calls["get"]
    r.clock.advance(r.cache.ttl / 2)
    assert (await r.execute()).replayed and r.db.calls["get"] == reads
    r.clock.advance(r.cache.ttl / 2 + 0.1)
    assert (await r.execute()).replayed and r.db.calls["get"] == reads + 1


async def test_a_duplicate_waits_on_a_claim_still_being_acknowledged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claimed row is visible before its insert returns to the claimant (a real store's
    commit hands back through a thread): a duplicate in the same process that reads it then
    waits on the claimant, it does not fall back to polling the store."""
    r = await rig()
    plain = r.store.insert_if_absent

    async def acknowledged_later(record: ActionRecord, event: ActionEvent | None = None) -> tuple[ActionRecord, bool]:
        result = await plain(record, event)
        for _ in range(3):
            await asyncio.sleep(0)
        return result

    monkeypatch.setattr(r.store, "insert_if_absent", acknowledged_later)
    first = asyncio.ensure_future(r.execute(command(call="c1")))
    await asyncio.sleep(0)  # the first caller's row is in, its insert not yet returned
    assert len(r.db.rows) == 1
    second = await r.execute(command(call="c2"))
    assert (await first).record.state is State.CONFIRMED and second.record == (await first).record
    assert r.clock.slept == [] and len(r.adapter.executed) == 1


async def test_ten_concurrent_callers_one_send() -> None:
    r = await rig()
    hang = Hang()
    r.adapter.script_execute(hang)
    callers = [asyncio.ensure_future(r.execute(command(call=f"c{i}"))) for i in range(10)]
    await hang.entered.wait()
    await asyncio.sleep(0)
    hang.release.set()
    results = await asyncio.gather(*callers)
    assert [res.replayed for res in results].count(False) == 1
    assert {res.record.state for res in results} == {State.CONFIRMED}
    assert len(r.adapter.executed) == 1 and len(r.adapter.effects) == 1


async def test_second_caller_past_its_deadline_gets_in_flight() -> None:
    r = await rig()
    hang = Hang()
    r.adapter.script_execute(hang)
    first = asyncio.ensure_future(r.execute())
    await hang.entered.wait()
    with pytest.raises(InFlight) as caught:
        await r.execute(command(call="late"), budget=0.0)
    assert caught.value.retry_after == pytest.approx(r.settings.lease_ttl)
    hang.release.set()
    assert (await first).record.state is State.CONFIRMED
    assert len(r.adapter.effects) == 1


async def test_duplicate_on_another_replica_waits_for_the_holder() -> None:
    r = await rig()
    other = await r.replica("worker-2")
    hang = Hang()
    r.adapter.script_execute(hang)
    first = asyncio.ensure_future(r.execute())
    await hang.entered.wait()
    waiting = asyncio.ensure_future(other.execute(command(call="dup")))
    for _ in range(5):  # the duplicate polls the store in virtual time
        await asyncio.sleep(0)
    assert not waiting.done()
    hang.release.set()
    assert (await first).record.state is State.CONFIRMED
    answer = await waiting
    assert answer.replayed and answer.record.state is State.CONFIRMED
    assert len(r.adapter.executed) == 1


async def test_lost_answer_at_a_deduplicating_provider_is_retried_with_the_same_key() -> None:
    clock = FakeClock()
    r = await rig(clock=clock, adapter=ScriptedAdapter(clock, dedups_on_key=True, search_lag=10.0))
    r.adapter.script_execute(Lost())
    result = await r.execute()
    assert result.record.state is State.CONFIRMED and result.record.attempts == 2
    assert len(r.adapter.effects) == 1
    assert {c.provider_key for c in r.adapter.executed} == {r.adapter.effects[0].provider_key}


async def test_lost_answer_is_verified_not_repeated() -> None:
    clock = FakeClock()
    r = await rig(
        clock=clock, adapter=ScriptedAdapter(clock, dedups_on_key=False, search_lag=3.0), consistency_window=5.0
    )
    r.adapter.script_execute(Lost())
    result = await r.execute()
    # Not visible for 3 s, inside the 5 s window: the driver waits it out in virtual time.
    assert result.record.state is State.CONFIRMED and result.record.attempts == 1
    assert len(r.adapter.effects) == 1 and len(r.adapter.executed) == 1
    assert sum(clock.slept) >= 3.0


async def test_not_found_exactly_at_the_window_end_is_absence() -> None:
    clock = FakeClock()
    r = await rig(clock=clock, adapter=ScriptedAdapter(clock, dedups_on_key=False), consistency_window=5.0)
    r.adapter.script_execute(AmbiguousError("reset before sending"))  # no effect, but unknown
    result = await r.execute()
    assert result.record.state is State.CONFIRMED and result.record.attempts == 2
    assert len(r.adapter.effects) == 1
    second = r.adapter.executed_at[1] - r.adapter.executed_at[0]
    assert second == pytest.approx(5.0)  # re-sent at the first instant absence is proven


async def test_search_lag_longer_than_first_verification_makes_no_second_effect() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False, search_lag=4.9)
    r = await rig(clock=clock, adapter=adapter, consistency_window=5.0)
    r.adapter.script_execute(Lost())
    result = await r.execute()
    assert result.record.state is State.CONFIRMED
    assert len(adapter.effects) == 1 and len(adapter.executed) == 1


async def test_short_deadline_parks_until_the_window_closes_then_the_reconciler_confirms() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False, search_lag=6.0)
    r = await rig(clock=clock, adapter=adapter, consistency_window=8.0)
    r.adapter.script_execute(Lost())
    start = clock()
    parked = (await r.execute(budget=1.0)).record
    assert parked.state is State.UNKNOWN and parked.next_step is NextStep.RECHECK
    assert parked.next_check_at == pytest.approx(start + 8.0)
    assert await r.reconciler.run_once() == 0  # not due before the window has closed
    clock.now = start + 8.0
    assert await r.reconciler.run_once() == 1
    await r.reconciler.stop()
    assert r.stored(ACTION).state is State.CONFIRMED
    assert len(adapter.effects) == 1 and len(adapter.executed) == 1


async def test_read_back_that_hangs_times_out_to_unknown() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False)
    r = await rig(clock=clock, adapter=adapter, attempt_timeout=0.06)
    adapter.script_execute(Lost())
    adapter.script_verify(Hang())  # never released: the driver's own timeout fires (60 ms real)
    record = (await r.execute()).record
    assert record.state is State.UNKNOWN and record.reason == "read-back timed out"
    assert record.next_step is NextStep.RECHECK and record.next_check_at == pytest.approx(clock() + 2.0)
    assert len(adapter.executed) == 1


async def test_read_back_that_fails_is_unknown_and_never_a_resend() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False)
    r = await rig(clock=clock, adapter=adapter)
    adapter.script_execute(Lost())
    adapter.script_verify(RuntimeError("adapter bug"), Observation.unknown("read API 503"))
    record = (await r.execute()).record
    assert record.state is State.UNKNOWN and record.reason == "read-back failed: RuntimeError"
    # The next Execute verifies again and never re-sends on a guess.
    again = (await r.execute(command(call="again"))).record
    assert again.state is State.UNKNOWN and again.reason == "read API 503"
    assert len(adapter.executed) == 1 and again.checks == 2


async def test_provider_without_read_api_leaves_it_to_an_operator() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False, has_read_api=False)
    r = await rig(clock=clock, adapter=adapter)
    adapter.script_execute(Lost())
    record = (await r.execute()).record
    assert record.state is State.UNKNOWN and record.next_step is NextStep.OPERATOR
    assert len(adapter.executed) == 1


async def test_lease_lost_mid_flight_stops_the_stale_worker() -> None:
    r = await rig(lease_ttl=10.0)
    other = await r.replica("worker-2")
    hang = Hang(then=Lost())
    r.adapter.script_execute(hang)
    stale = asyncio.ensure_future(r.execute())
    await hang.entered.wait()
    r.clock.advance(11.0)  # the stale worker's lease runs out while it is at the provider
    taken = await other.protocol.claim_due(10)
    assert [t.lease_owner for t in taken] == ["worker-2"]
    hang.release.set()
    answer = await stale  # its conditional write is refused: it stops and reports the store
    assert answer.record.lease_owner == "worker-2" and answer.record.state is State.DISPATCHED
    settled = await other.protocol.drive_leased(taken[0])
    assert settled.state is State.CONFIRMED and settled.attempts == 1
    assert len(r.adapter.executed) == 1 and len(r.adapter.effects) == 1


async def test_store_down_before_the_claim_sends_nothing() -> None:
    r = await rig()
    r.db.down = True
    with pytest.raises(GatewayUnavailable):
        await r.execute()
    assert r.adapter.executed == []


async def test_store_failing_after_the_claim_sends_nothing_more_and_recovers() -> None:
    r = await rig(lease_ttl=10.0)
    r.db.fail_writes_after(1)  # the claim goes through; the settle write fails
    with pytest.raises(GatewayUnavailable) as caught:
        await r.execute()
    assert caught.value.retry_after == 10.0
    assert len(r.adapter.executed) == 1 and len(r.adapter.effects) == 1
    assert r.stored(ACTION).state is State.DISPATCHED
    r.db.heal()
    assert await r.reconciler.run_once() == 0  # the dead drive's lease is still live
    r.clock.advance(10.0)
    assert await r.reconciler.run_once() == 1
    await r.reconciler.stop()
    # Verified first: the effect is found (or absorbed by the same key), never doubled.
    assert r.stored(ACTION).state is State.CONFIRMED
    assert len(r.adapter.effects) == 1


async def test_crash_after_the_claim_recovers_by_verification() -> None:
    """The claim was inserted DISPATCHED and the process died before the send: recovery verifies,
    proves absence once the window has passed, and only then sends."""
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False)
    r = await rig(clock=clock, adapter=adapter, lease_ttl=10.0, consistency_window=3.0)
    cmd = command()
    claim = t.Claim(cmd.identity, ACTION, "effectgate.tools.v1.ChargeCard", CHARGE.SerializeToString(), "fp", "dead")
    left_behind = t.create(replace(claim, send_now=True), clock(), r.policy)
    await r.store.insert_if_absent(left_behind)
    clock.advance(10.0)
    assert await r.reconciler.run_once() == 1
    await r.reconciler.stop()
    record = r.stored(ACTION)
    assert record.state is State.CONFIRMED and record.attempts == 2
    assert len(adapter.effects) == 1 and len(adapter.executed) == 1 and len(adapter.verified) >= 1
