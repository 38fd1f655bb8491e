"""What a provider tells on its own, applied to actions: a verified webhook event is a reason to
read an in-doubt action now, or adds a refund or a dispute to a CONFIRMED action's history.

Bound: an event verified under adapter X's secret touches only actions X dispatched (the adapter
recorded on the action at dispatch), in a tenant X serves (`AdapterTenants`); any other action it
names is `unmatched`, and nothing changes.

Read before settle: an outcome event settles nothing by itself. The gateway reads the object the
event names through X's read API (the scheduled read-back's own call, `EffectProtocol.read_object`)
and applies what the read shows as an `observed` transition, so the same rules decide (the
consistency window among them). The event is the trigger in the story, the read the evidence
(`source = "webhook"`). A read that shows no matching effect changes nothing; a read that cannot
be made leaves the action in doubt with its next check brought forward (the provider is still
answered 2xx: it must not hammer us). Adapters that cannot read one object by its id (the generic
http adapter) judge the signed event itself (`observe_event`), as before.

Cheap first: the action is read without its lease, and an event that cannot change it (unbound,
settled already) is answered from that read; the provider is read without the lease too, and the
lease is taken only to write what the read shows, if the action has not moved meanwhile. Each
event id is applied once (claimed in the store's provider log before anything changes); the claim
is dropped again when nothing was applied. Any exception while the action is leased releases the
lease here, in one place (`_write`), unless the write may have landed (then it released it).
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from effectgate.adapters.base import Adapter, Observation, Outcome
from effectgate.adapters.capabilities import EventKind, ProviderEvent, ReceivesWebhooks
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.verbs import EffectProtocol
from effectgate.gateway.core.tools import BoundTool, ToolSet
from effectgate.gateway.model import IN_DOUBT, ActionRecord, InvalidRequest
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.webhooks")


class Applied(enum.Enum):
    SETTLED = "settled"  # the read the event triggered moved a DISPATCHED or UNKNOWN action
    NOTED = "noted"  # a refund or dispute went into a CONFIRMED action's history
    IGNORED = "ignored"  # nothing to change (already settled, a type we do not act on)
    UNMATCHED = "unmatched"  # no action of this adapter's (no action id, not ours, another tenant's)
    UNCONFIRMED = "unconfirmed"  # the read does not show what the event says: nothing changed
    DEFERRED = "deferred"  # the read could not be made: in doubt, checked again soon


class Replayed(Exception):
    """The event id was applied before: nothing changes."""


class Busy(Exception):
    """The action is leased by a worker, or not settled yet for a note: the provider should retry."""


@dataclass(frozen=True)
class AdapterTenants:
    """Which tenants each adapter serves: those whose principals may call a tool on it. `None`
    (no principals: single-tenant development mode) lets every tenant through."""

    by_adapter: Mapping[str, frozenset[str]] | None = None

    def serves(self, adapter: str, tenant: str) -> bool:
        return self.by_adapter is None or tenant in self.by_adapter.get(adapter, frozenset())


def read_failed(observation: Observation) -> bool:
    """The read-back could not be made (the provider down, a timeout), as opposed to a read that
    saw something: adapters mark it `read_failed`; the driver's own failures say `read-back`."""
    return observation.outcome is Outcome.UNKNOWN and (
        bool(observation.evidence.get("read_failed")) or observation.detail.startswith("read-back")
    )


class ProviderReports:
    def __init__(
        self, protocol: EffectProtocol, store: Store, tools: ToolSet, tenants: AdapterTenants | None = None
    ) -> None:
        self._protocol = protocol
        self._store = store
        self._tools = tools
        self._tenants = tenants or AdapterTenants()

    async def apply(self, source: str, adapter: ReceivesWebhooks, event: ProviderEvent) -> Applied:
        """Applies one verified event of adapter `source` (raises Replayed or Busy)."""
        if not event.action_id:
            return Applied.UNMATCHED
        if event.kind is EventKind.OTHER:
            return Applied.IGNORED
        record = await self._protocol.peek(event.action_id)
        if record is None:
            return Applied.UNMATCHED
        if not self._bound(source, record):
            log.warning(
                "webhook %s (%s) on %s names %s, which %s did not dispatch or whose tenant it does not "
                "serve; nothing changed",
                event.event_id,
                event.type,
                source,
                record.action_id,
                source,
            )
            return Applied.UNMATCHED
        if event.kind.settles and not t.allows(record.state, t.Observed.name):
            return Applied.IGNORED  # settled already: answered without the action's lock
        if record.leased_at(self._protocol.now()):
            raise Busy(record.action_id)  # being driven right now: the provider retries
        store = self._store
        if not await store.claim_provider_event(
            source, event.event_id, event.action_id, event.kind.value, self._protocol.now()
        ):
            raise Replayed(event.event_id)
        try:
            if event.kind.settles:
                applied = await self._settle(record, source, adapter, event)
            else:
                applied = await self._note(record, source, event)
        except BaseException:
            with contextlib.suppress(Exception):
                await store.forget_provider_event(source, event.event_id)
            raise
        if applied in (Applied.IGNORED, Applied.UNCONFIRMED):
            await store.forget_provider_event(source, event.event_id)
        return applied

    def _bound(self, source: str, record: ActionRecord) -> bool:
        dispatched_by = record.adapter
        if not dispatched_by:  # stored before the dispatching adapter was recorded
            try:
                dispatched_by = self._tools.get(record.tool).config.adapter
            except InvalidRequest:
                return False
        return dispatched_by == source and self._tenants.serves(source, record.tenant)

    async def _settle(
        self, record: ActionRecord, source: str, adapter: ReceivesWebhooks, event: ProviderEvent
    ) -> Applied:
        """Reads first, without the lease (nothing is written when the read shows nothing), then
        writes what the read shows under the lease."""
        tool = self._tool_of(record, adapter)
        read_at = self._protocol.now()
        caps = tool.adapter.capabilities
        if isinstance(adapter, Adapter) and caps.reads_event_objects and caps.has_read_api:
            observation = await self._protocol.read_object(record, tool, event.object_id)
        else:
            observation = adapter.observe_event(event, tool.action_call(record))
        evidence = {"source": "webhook", "event_id": event.event_id, "event_type": event.type}
        observed = t.Observed(replace(observation, evidence={**observation.evidence, **evidence}), read_at=read_at)
        applied = _verdict(event, observation)
        if applied is Applied.SETTLED and self._protocol.preview(record, observed).state in IN_DOUBT:
            applied = Applied.UNCONFIRMED  # absence inside the window proves nothing yet: its check decides
        if applied is Applied.UNCONFIRMED:
            log.warning(
                "webhook %s (%s) on %s about %s: the read shows %s (%s); nothing changed",
                event.event_id,
                event.type,
                source,
                record.action_id,
                observation.outcome.value,
                observation.detail,
            )
            return applied
        settled = await self._write(record, observed)
        log.info(
            "webhook %s (%s) read %s: %s to %s",
            event.event_id,
            event.type,
            record.action_id,
            record.state.value,
            settled.state.value,
        )
        return Applied.DEFERRED if settled.state in IN_DOUBT else Applied.SETTLED

    async def _note(self, record: ActionRecord, source: str, event: ProviderEvent) -> Applied:
        if not t.allows(record.state, t.ProviderNote.name):
            raise Busy(event.action_id)  # a refund before its payment settled here: later
        detail = ", ".join(f"{k}={v}" for k, v in sorted(event.detail.items()) if v not in (None, ""))
        await self._write(
            record, t.ProviderNote(source=source, event_id=event.event_id, kind=event.kind.value, detail=detail)
        )
        return Applied.NOTED

    async def _write(self, record: ActionRecord, event: t.Event) -> ActionRecord:
        """Commits `event` under the action's lease, if the action is still as `record` shows it;
        the one place that lets the lease go when anything fails."""
        leased = await self._protocol.try_lease(record.action_id)
        if leased is None:
            raise Busy(record.action_id)
        try:
            if (leased.state, leased.attempts, leased.generation) != (record.state, record.attempts, record.generation):
                raise Busy(record.action_id)  # moved since our read: the provider's retry reads again
            return await self._protocol.commit(leased, event)
        except BaseException:
            with contextlib.suppress(Exception):
                if await self._unwritten(leased):
                    await self._protocol.release(leased)
            raise

    async def _unwritten(self, leased: ActionRecord) -> bool:
        """Whether the action is still as we leased it. A commit whose answer was lost (the
        connection dropped after COMMIT) may have landed: releasing `leased` then would write the
        action back as it was before the commit, under the same fence (a CONFIRMED back to
        UNKNOWN: the simulator's seed 2166). The commit released the lease itself."""
        now = await self._protocol.peek(leased.action_id)
        return now is not None and (now.state, now.fence, now.lease_owner, now.updated_at) == (
            leased.state,
            leased.fence,
            leased.lease_owner,
            leased.updated_at,
        )

    def _tool_of(self, record: ActionRecord, adapter: ReceivesWebhooks) -> BoundTool:
        """The action's tool, reading through the adapter that dispatched it (the event's) even
        when the tool has been moved to another adapter since."""
        tool = self._tools.get(record.tool)
        if isinstance(adapter, Adapter) and tool.adapter is not adapter:
            return replace(tool, adapter=adapter)
        return tool


def _verdict(event: ProviderEvent, observation: Observation) -> Applied:
    """What a webhook-triggered read may apply: a confirmation; a proof that no money moved for a
    failure or cancel event, when the read found the event's object (`found`); a failed read (in
    doubt, checked again soon). Anything else (the object absent, another action's, differing from
    the payload) changes nothing."""
    if observation.outcome is Outcome.CONFIRMED:
        return Applied.SETTLED
    if read_failed(observation):
        return Applied.DEFERRED
    if (
        observation.outcome is Outcome.NOT_FOUND
        and event.kind in (EventKind.FAILED, EventKind.CANCELED)
        and int(observation.evidence.get("found") or 0) > 0
    ):
        return Applied.SETTLED
    return Applied.UNCONFIRMED
