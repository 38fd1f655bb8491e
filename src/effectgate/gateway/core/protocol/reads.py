"""The effect protocol's read verbs, for the RPC layer and operators: get, peek, list, history,
settled_at, events (the audit trail), changes (the watch), awaiting (the approval expiry's work),
read_object (a webhook's read-back) and verify (a read-back now, which writes only under a lease
it could take). Every read goes through the store guard and the tenant check.
"""

from __future__ import annotations

import builtins

from effectgate.adapters.base import Observation, Receipt
from effectgate.gateway.core.protocol.collaborators import Collaborators
from effectgate.gateway.core.protocol.driver import Driver, LeaseLost
from effectgate.gateway.core.protocol.leases import Leases
from effectgate.gateway.core.tools import BoundTool, DispatcherGone
from effectgate.gateway.model import (
    ActionEvent,
    ActionNotFound,
    ActionRecord,
    EventPage,
    EventQuery,
    InFlight,
    InvalidRequest,
    ListQuery,
    Page,
)


class Reads:
    def __init__(self, parts: Collaborators, driver: Driver, leases: Leases) -> None:
        self._parts = parts
        self._driver = driver
        self._leases = leases

    async def verify(self, tenant: str, action_id: str) -> tuple[ActionRecord, Observation]:
        """A read-back now. It updates the action only if nobody drives it; it never dispatches."""
        record = await self.get(tenant, action_id)
        try:
            tool = self._parts.tools.driving(record)  # an attempt in doubt is read where it was sent
        except DispatcherGone as gone:
            return record, Observation.unknown(gone.reason, dispatched_by=gone.adapter)
        leased = await self._leases.try_lease(action_id)
        if leased is None:  # in flight elsewhere: observe without writing
            return record, await self._driver.read_back(record, tool, self._parts.clock() + tool.config.attempt_timeout)
        try:
            return await self._parts.guard(self._driver.observe(leased, tool))
        except LeaseLost:
            raise InFlight(action_id, retry_after=1.0) from None

    async def read_object(self, record: ActionRecord, tool: BoundTool, external_id: str) -> Observation:
        """The read-back a scheduled check makes (the driver's, with its timeout and span), but of
        the provider object `external_id` names (a webhook's): it writes nothing."""
        probe = record.evolve(receipt=Receipt(external_id=external_id)) if external_id else record
        return await self._driver.read_back(probe, tool, self._parts.clock() + tool.config.attempt_timeout)

    async def peek(self, action_id: str) -> ActionRecord | None:
        """The stored action, or None, without a lease (the store guarded)."""
        return await self._parts.guard(self._parts.store.get(action_id))

    async def get(self, tenant: str, action_id: str) -> ActionRecord:
        record = await self._parts.get(action_id)
        if record.tenant != tenant:
            raise ActionNotFound(action_id)
        return record

    async def list(self, query: ListQuery) -> Page:
        try:
            return await self._parts.guard(self._parts.store.list(query))
        except ValueError:
            raise InvalidRequest([("page_token", "not a token this gateway issued")]) from None

    async def events(self, query: EventQuery) -> EventPage:
        """One tenant's audit trail (every action's events, in its chain's order), one page."""
        try:
            return await self._parts.guard(self._parts.store.events(query))
        except ValueError:
            raise InvalidRequest([("page_token", "not a token this gateway issued")]) from None
        except NotImplementedError:
            raise InvalidRequest([("store", "this gateway's store keeps no audit trail")]) from None

    async def history(self, tenant: str, action_id: str) -> builtins.list[ActionEvent]:
        """The action's story, oldest first (never another tenant's)."""
        await self.get(tenant, action_id)
        return await self._parts.guard(self._parts.store.history(action_id))

    async def settled_at(self, record: ActionRecord) -> float | None:
        """When a terminal action reached its final state, read from its story: a refund or a
        dispute noted later changes the record's `updated_at`, not when it settled. The record's
        `updated_at` when the story has no such entry (an action stored before the story began)."""
        if not record.state.terminal:
            return None
        settled: float | None = None
        for event in await self._parts.guard(self._parts.store.history(record.action_id)):
            if not event.state.terminal:
                settled = None
            elif settled is None:
                settled = event.at
        return record.updated_at if settled is None else settled

    async def changes(self, query: ListQuery) -> builtins.list[ActionRecord]:
        """One tenant's actions in the order they last changed, after `query.after` (the watch)."""
        return await self._parts.guard(self._parts.store.changes(query))

    async def awaiting(self, tool: str, created_before: float, limit: int) -> builtins.list[ActionRecord]:
        """Actions of `tool` waiting for approval since before `created_before` (the expiry's work)."""
        return await self._parts.guard(self._parts.store.awaiting(tool, created_before, limit))
