"""The effect protocol's lease verbs, for those who take an action's lease outside Execute:
operators (try_lease, lease, commit, release) and the reconciler (claim_due, wait_for_work,
wake_reconciler).

A mixin rather than a collaborator: operators, the reconciler and the server hold one
`EffectProtocol` and call these verbs on it, and the verbs use the protocol's own parts (store,
cache, clock, lease settings, the store guard, the reconciler's wake-up); a collaborator would
take all of them and need a forwarding method per verb.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib

from effectgate.gateway.core import failpoints
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.driver import LeaseLost
from effectgate.gateway.core.protocol.parts import ProtocolParts
from effectgate.gateway.model import ActionRecord, InFlight, State


class LeaseVerbs(ProtocolParts):
    # -- verbs for operators ---------------------------------------------------------------------

    async def try_lease(self, action_id: str) -> ActionRecord | None:
        """The action's lease if nobody holds a live one (any change we make drops the cache)."""
        self._cache.drop(action_id)
        return await self._guard(
            self._store.acquire_lease(action_id, self._settings.owner, self._clock(), self._settings.lease_ttl)
        )

    async def lease(self, action_id: str) -> ActionRecord:
        """The action's lease, or InFlight when another worker holds it."""
        leased = await self.try_lease(action_id)
        if leased is None:
            await self._get(action_id)  # raises ActionNotFound when absent
            raise InFlight(action_id, retry_after=1.0)
        return leased

    async def commit(self, leased: ActionRecord, event: t.Event) -> ActionRecord:
        """Applies an operator's event to a leased record and releases the lease in one write
        (with the event's entry in the action's story)."""
        changed = t.apply(leased, event, self._clock(), self._policy_of_record(leased))
        released = await self.release(changed, event)
        if released.state is State.PLANNED:
            failpoints.hit("after_planned")
            self._work_ready.set()  # the reconciler dispatches it unless an agent does first
        return released

    def preview(self, record: ActionRecord, event: t.Event) -> ActionRecord:
        """What `commit` would write for `event`, without writing (the same rules, the same clock)."""
        return t.apply(record, event, self._clock(), self._policy_of_record(record))

    async def release(self, leased: ActionRecord, event: t.Event | None = None) -> ActionRecord:
        self._cache.drop(leased.action_id)
        try:
            return await self._guard(self._driver.release(leased, event))
        except LeaseLost:
            raise InFlight(leased.action_id, retry_after=1.0) from None

    # -- verbs for the reconciler ----------------------------------------------------------------

    async def claim_due(self, limit: int) -> builtins.list[ActionRecord]:
        """Leases up to `limit` actions that need the reconciler (see `Store.claim_due`)."""
        settings = self._settings
        if self._clock_problem():  # paused: the watcher logs it once and wakes us when it ends
            return []
        return await self._guard(self._store.claim_due(settings.owner, self._clock(), settings.lease_ttl, limit))

    def wake_reconciler(self) -> None:
        """Work may be due now (e.g. the clock is trusted again after a skew)."""
        self._work_ready.set()

    async def wait_for_work(self, stop: asyncio.Event, timeout: float) -> None:
        """Returns when work is signalled or after `timeout` (at once when `stop` is already set)."""
        self._work_ready.clear()
        if stop.is_set():
            return
        # One timeout on the signal alone: whoever sets `stop` (the background runner) also
        # cancels the waiting task, so racing `stop.wait()` too cost two futures and an
        # `asyncio.wait` on every idle pass.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._work_ready.wait()
