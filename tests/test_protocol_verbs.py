"""The protocol's verbs besides Execute (Verify, drain, leases for operators) and the driver's
guard rails, in-process and in virtual time (effectgate.testing)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from effectgate.adapters.base import Outcome
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.collaborators import Collaborators
from effectgate.gateway.core.protocol.driver import Driver, LeaseLost
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model.domain import NextStep, State
from effectgate.gateway.model.errors import ActionNotFound, InFlight
from effectgate.testing import CHARGE, Hang, Lost, ScriptedAdapter, command, rig
from effectgate.testing.clock import FakeClock
from effectgate.testing.rig import TOOL

ACTION = command().identity.action_id


async def test_verify_of_a_lost_answer_inside_the_window_parks_it() -> None:
    clock = FakeClock()
    adapter = ScriptedAdapter(clock, dedups_on_key=False, search_lag=100.0)
    r = await rig(clock=clock, adapter=adapter, consistency_window=10.0)
    adapter.script_execute(Lost())
    parked = (await r.execute(budget=1.0)).record
    assert parked.state is State.UNKNOWN
    clock.advance(1.0)
    record, observation = await r.protocol.verify("acme", ACTION)
    assert observation.outcome is Outcome.NOT_FOUND  # not proof of absence yet
    assert record.state is State.UNKNOWN and record.next_step is NextStep.RECHECK and record.lease_owner == ""
    assert len(adapter.executed) == 1


async def test_verify_while_another_worker_drives_reads_without_writing() -> None:
    r = await rig()
    hang = Hang()
    r.adapter.script_execute(hang)
    first = asyncio.ensure_future(r.execute())
    await hang.entered.wait()
    other = await r.replica("worker-2")
    writes = r.db.writes
    record, observation = await other.protocol.verify("acme", ACTION)
    assert record.state is State.DISPATCHED and observation.outcome is Outcome.NOT_FOUND
    assert r.db.writes == writes + 1  # only the refused lease attempt
    with pytest.raises(InFlight):
        await other.operations.reconcile("acme", ACTION, State.NOT_FOUND, "ops", "absent", "")
    hang.release.set()
    await first
    await other.protocol.drain(1.0)


async def test_drain_lets_the_running_drive_finish() -> None:
    r = await rig()
    hang = Hang()
    r.adapter.script_execute(hang)
    caller = asyncio.ensure_future(r.execute())
    await hang.entered.wait()
    caller.cancel()  # the caller gives up; the drive carries on in its own task
    draining = asyncio.ensure_future(r.protocol.drain(5.0))
    await asyncio.sleep(0)
    assert not draining.done()
    hang.release.set()
    await draining
    assert r.stored(ACTION).state is State.CONFIRMED


async def test_an_action_id_of_another_tenant_is_never_mixed_in() -> None:
    r = await rig()
    cmd = command()
    foreign = replace(cmd.identity, tenant="globex")
    claim = t.Claim(foreign, ACTION, "effectgate.tools.v1.ChargeCard", CHARGE.SerializeToString(), "fp", "w")
    await r.store.insert_if_absent(t.create(claim, r.clock(), r.policy))
    with pytest.raises(ActionNotFound):
        await r.execute(cmd)
    assert r.adapter.executed == []
    with pytest.raises(ActionNotFound):
        await r.operations.approve("acme", "act_absent", "ops", "")


async def test_no_time_left_to_send_is_recorded_and_nothing_is_sent() -> None:
    clock = FakeClock()
    r = await rig(clock=clock)
    tools = ToolSet({TOOL: BoundTool(r.tool, r.adapter)})
    driver = Driver(Collaborators(r.store, tools, r.settings, clock=clock, sleep=clock.sleep))
    claim = t.Claim(command().identity, ACTION, "t", CHARGE.SerializeToString(), "fp", "worker-1", send_now=True)
    record = t.create(claim, clock(), r.policy)
    await r.store.insert_if_absent(record)
    tool = BoundTool(r.tool, r.adapter)
    done = await driver.drive(record, tool, deadline=clock() + 0.01, unsent=True)
    assert r.adapter.executed == [] and done.lease_owner == ""
    assert done.state is State.UNKNOWN and done.attempts == 1  # parked: verified later, then sent
    stale = record.evolve(fence=record.fence - 1)
    with pytest.raises(LeaseLost):
        await driver.release(stale)
