"""A new watch (the live inbox, WatchActions) on one replica and changes stamped by another.

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
from effectgate.gateway.model import ListQuery, State
from effectgate.gateway.store import decode_cursor
from effectgate.testing import rig
from effectgate.testing.clock import FakeClock

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


async def test_a_new_watch_delivers_a_change_stamped_before_it_began_by_a_replica_behind_it() -> None:
    a = await rig(approval=Approval.REQUIRED)
    b = await rig(owner="worker-2", clock=Skewed(a.clock, 0.4), adapter=a.adapter, db=a.db, tool=a.tool)
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
