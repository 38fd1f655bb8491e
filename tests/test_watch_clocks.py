"""A new or resumed watch (the live inbox, WatchActions; the waits' feed, WaitAction) on one
replica and changes stamped by another.

Replicas on one PostgreSQL stamp changes by their own reading of the store's clock, which may be
off by up to half a probe's round trip (`StoreClock`). A watch that starts at its replica's "now"
must still deliver a change another replica stamped a little before that and committed after;
what was already stored when it started is the past, and is not delivered. Found by a pair run:
tests/test_decisions.py's watch across two PostgreSQL replicas waited 30 s for an action made on
the other replica, under load.
"""

from __future__ import annotations

import asyncio

from effectgate.gateway.config.schema import Approval
from effectgate.gateway.core.operators.inbox import Watch
from effectgate.gateway.core.operators.waits import Waits, decided
from effectgate.gateway.model import ListQuery, State
from effectgate.gateway.store import decode_cursor
from effectgate.testing import rig
from effectgate.testing.clock import FakeClock
from effectgate.testing.rig import Rig, command

TENANT = "acme"


class Skewed(FakeClock):
    """Another replica's reading of the same clock, `offset` seconds off."""

    def __init__(self, base: FakeClock, offset: float) -> None:
        super().__init__()
        self.base, self.offset = base, offset

    def __call__(self) -> float:
        return self.base() + self.offset

    def advance(self, seconds: float) -> None:
        self.base.advance(seconds)

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)


async def b_ahead_of_a() -> tuple[Rig, Rig]:
    """Two replicas on one store; B's reading of the clock 0.4 s ahead of A's."""
    a = await rig(approval=Approval.REQUIRED)
    b = await rig(owner="worker-2", clock=Skewed(a.clock, 0.4), adapter=a.adapter, db=a.db, tool=a.tool)
    return a, b


async def test_a_new_watch_delivers_a_change_stamped_before_it_began_by_a_replica_behind_it() -> None:
    a, b = await b_ahead_of_a()
    watch = Watch(b.protocol, ListQuery(tenant=TENANT), "", poll=0.0)
    began = decode_cursor(await watch.start())[0]
    a.clock.advance(0.1)
    made = (await a.execute()).record
    assert made.state is State.AWAITING_APPROVAL and made.updated_at < began  # A's clock is behind B's
    seen = await asyncio.wait_for(anext(watch.changes()), 10)  # bounds a watch that never sees it
    assert (seen.record.action_id, seen.record.state) == (made.action_id, State.AWAITING_APPROVAL)


async def test_what_was_stored_when_a_watch_began_is_not_delivered_what_changes_after_is() -> None:
    a = await rig(approval=Approval.REQUIRED)
    before = (await a.execute()).record
    watch = Watch(a.protocol, ListQuery(tenant=TENANT), "", poll=0.0)
    await watch.start()
    a.clock.advance(1.0)
    await a.operations.deny(TENANT, before.action_id, "ops", "no")
    seen = await asyncio.wait_for(anext(watch.changes()), 10)
    assert (seen.record.action_id, seen.record.state) == (before.action_id, State.REJECTED)


async def test_a_resumed_watch_delivers_a_change_stamped_before_its_cursor_and_committed_after() -> None:
    """A watch on B delivers B's action X and ends; A, whose clock reads 0.4 s behind B's, then
    makes Y, stamped before X. A watch resumed from X's cursor delivers Y (it never did: Y was at
    or before the cursor), and does not send X, the cursor's own change, again."""
    a, b = await b_ahead_of_a()
    first = Watch(b.protocol, ListQuery(tenant=TENANT), "", poll=0.0)
    await first.start()
    b.clock.advance(1.0)
    x = (await b.execute(command(run="run-x"))).record
    delivered = await asyncio.wait_for(anext(first.changes()), 10)
    assert delivered.record.action_id == x.action_id
    a.clock.advance(0.1)
    y = (await a.execute(command(run="run-y"))).record
    assert y.updated_at < x.updated_at  # stamped before the cursor, committed after the watch ended
    resumed = Watch(b.protocol, ListQuery(tenant=TENANT), delivered.cursor, poll=0.0)
    assert await resumed.start() == delivered.cursor
    changes = resumed.changes()
    seen = await asyncio.wait_for(anext(changes), 10)  # bounds a watch that never sees it
    assert (seen.record.action_id, seen.record.state) == (y.action_id, State.AWAITING_APPROVAL)
    a.clock.advance(1.0)
    await a.operations.deny(TENANT, y.action_id, "ops", "no")
    after = await asyncio.wait_for(anext(changes), 10)
    assert (after.record.action_id, after.record.state) == (y.action_id, State.REJECTED)  # not X again


async def test_a_wait_sees_a_decision_stamped_before_its_feed_began_by_a_replica_behind_it() -> None:
    """The waits' feed (WaitAction) had the same blind spot: the wait ran until its timeout. The
    60 s timeout only bounds a wait that never sees the decision."""
    a, b = await b_ahead_of_a()
    made = (await a.execute()).record
    waits = Waits(b.protocol, poll=0.01)
    waiting = asyncio.ensure_future(waits.wait(TENANT, made.action_id, decided, 60.0))
    while not waits.active:  # noqa: ASYNC110 (no event says so) the wait has read the action and joined
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)  # the feed has started and polled
    a.clock.advance(0.1)
    denied = await a.operations.deny(TENANT, made.action_id, "ops", "no")
    assert denied.updated_at < b.clock()  # stamped before the feed began, by B's clock
    started = asyncio.get_running_loop().time()
    record, reached = await asyncio.wait_for(waiting, 90)
    assert reached and record.state is State.REJECTED
    assert asyncio.get_running_loop().time() - started < 30  # seen by the feed, not at the timeout


async def test_a_wait_that_runs_out_says_whether_the_action_it_reads_then_got_there() -> None:
    """A wait whose feed cannot deliver (its replica stalled, in the simulator's seeds 12, 57, 78)
    answers at its timeout with the action as read then: `reached` says whether that record is
    where the wait was waiting for it to be, not merely that the timeout fired."""
    a = await rig(approval=Approval.REQUIRED)
    made = (await a.execute()).record
    waits = Waits(a.protocol, poll=3600.0)  # the feed polls once, before the decision
    waiting = asyncio.ensure_future(waits.wait(TENANT, made.action_id, decided, 0.5))
    while not waits.active:  # noqa: ASYNC110 (no event says so)
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)  # the feed has polled, and sleeps
    await a.operations.deny(TENANT, made.action_id, "ops", "no")
    record, reached = await waiting
    assert record.state is State.REJECTED and reached
