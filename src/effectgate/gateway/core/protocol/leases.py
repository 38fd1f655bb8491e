"""The effect protocol's lease verbs, for those who take an action's lease outside Execute:
operators (try_lease, lease, commit, preview, release) and the reconciler (claim_due,
wait_for_work, wake_reconciler). The Execute path and `verify` take leases through them too.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib

from effectgate.gateway.core import failpoints
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.collaborators import Collaborators
from effectgate.gateway.core.protocol.driver import Driver, LeaseLost
from effectgate.gateway.model import ActionRecord, InFlight, State

# The pauses of a wait for another replica's lease: from POLL_MIN, doubling up to POLL_MAX.
POLL_MIN, POLL_MAX = 0.02, 0.5


class Leases:
    def __init__(self, parts: Collaborators, driver: Driver) -> None:
        self._parts = parts
        self._driver = driver

    # -- verbs for operators ---------------------------------------------------------------------

    async def try_lease(self, action_id: str) -> ActionRecord | None:
        """The action's lease if nobody holds a live one (any change we make drops the cache)."""
        parts = self._parts
        parts.cache.drop(action_id)
        return await parts.guard(
            parts.store.acquire_lease(action_id, parts.settings.owner, parts.clock(), parts.settings.lease_ttl)
        )

    async def lease(self, action_id: str, patience: float = 0.0) -> ActionRecord:
        """The action's lease. While another worker holds it (a read-back, a drive finishing its
        write), waits for it up to `patience` seconds on the protocol's clock, then InFlight."""
        give_up = self._parts.clock() + patience
        delay = POLL_MIN
        while True:
            leased = await self.try_lease(action_id)
            if leased is not None:
                return leased
            record = await self._parts.get(action_id)  # raises ActionNotFound when absent
            if self._parts.clock() >= give_up:
                raise InFlight(action_id, retry_after=1.0)
            delay = await self.wait_for_holder(record, give_up, delay)

    async def wait_for_holder(self, record: ActionRecord, until: float, delay: float) -> float:
        """Waits, at most until `until`, for whoever holds `record`'s lease: a holder in this
        process directly (never cancelled, its error never raised here), another one by a pause
        of `delay`; returns the next pause. The caller reads the action again."""
        parts = self._parts
        task = parts.inflight.get(record.action_id) or parts.claiming.get(record.action_id)
        if task is not None:
            await asyncio.wait([task], timeout=max(until - parts.clock(), 0.0))
            return delay
        await parts.sleep(min(delay, max(until - parts.clock(), 0.0)))
        return min(delay * 2, POLL_MAX)

    async def commit(self, leased: ActionRecord, event: t.Event) -> ActionRecord:
        """Applies an operator's event to a leased record and releases the lease in one write
        (with the event's entry in the action's story)."""
        changed = t.apply(leased, event, self._parts.clock(), self._parts.policy_of_record(leased))
        released = await self.release(changed, event)
        if released.state is State.PLANNED:
            failpoints.hit("after_planned")
            self._parts.work_ready.set()  # the reconciler dispatches it unless an agent does first
        return released

    def preview(self, record: ActionRecord, event: t.Event) -> ActionRecord:
        """What `commit` would write for `event`, without writing (the same rules, the same clock)."""
        return t.apply(record, event, self._parts.clock(), self._parts.policy_of_record(record))

    async def release(self, leased: ActionRecord, event: t.Event | None = None) -> ActionRecord:
        self._parts.cache.drop(leased.action_id)
        try:
            return await self._parts.guard(self._driver.release(leased, event))
        except LeaseLost:
            raise InFlight(leased.action_id, retry_after=1.0) from None

    # -- verbs for the reconciler ----------------------------------------------------------------

    async def claim_due(self, limit: int) -> builtins.list[ActionRecord]:
        """Leases up to `limit` actions that need the reconciler (see `Store.claim_due`)."""
        parts = self._parts
        settings = parts.settings
        if parts.clock_problem():  # paused: the watcher logs it once and wakes us when it ends
            return []
        return await parts.guard(parts.store.claim_due(settings.owner, parts.clock(), settings.lease_ttl, limit))

    def wake_reconciler(self) -> None:
        """Work may be due now (e.g. the clock is trusted again after a skew)."""
        self._parts.work_ready.set()

    async def wait_for_work(self, stop: asyncio.Event, timeout: float) -> None:
        """Returns when work is signalled or after `timeout` (at once when `stop` is already set)."""
        self._parts.work_ready.clear()
        if stop.is_set():
            return
        # One timeout on the signal alone: whoever sets `stop` (the background runner) also
        # cancels the waiting task, so racing `stop.wait()` too cost two futures and an
        # `asyncio.wait` on every idle pass.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._parts.work_ready.wait()
