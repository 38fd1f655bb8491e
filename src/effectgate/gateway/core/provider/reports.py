"""What a provider tells on its own, applied to actions: a verified webhook event settles a
DISPATCHED or UNKNOWN action, or adds a refund or a dispute to a CONFIRMED action's history.

Like the operator verbs (`operator.py`), each change leases the action first, so it cannot race a
worker driving it, and is one transition committed in the write that releases the lease: an
outcome is `observed` (the event judged by the adapter like a read-back, kept as the action's
observation with the event id), a refund or dispute is `provider_note` (today a note on the
record; the event carries what an action-history row needs). Each event id is applied once: it is
claimed in the store's provider log before anything changes, and the claim is dropped again when
the action is busy (leased by a worker), so that the provider's retry applies it.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import replace

from effectgate.adapters.capabilities import EventKind, ProviderEvent, ReceivesWebhooks
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol import EffectProtocol
from effectgate.gateway.core.tools import ToolSet
from effectgate.gateway.model import ActionRecord
from effectgate.gateway.store import Store

log = logging.getLogger("effectgate.webhooks")


class Applied(enum.Enum):
    SETTLED = "settled"  # an outcome event moved a DISPATCHED or UNKNOWN action
    NOTED = "noted"  # a refund or dispute went into a CONFIRMED action's history
    IGNORED = "ignored"  # nothing to change (already settled, a type we do not act on)
    UNMATCHED = "unmatched"  # no action of ours (no action id, or not in this store)


class Replayed(Exception):
    """The event id was applied before: nothing changes."""


class Busy(Exception):
    """The action is leased by a worker, or not settled yet for a note: the provider should retry."""


class ProviderReports:
    def __init__(self, protocol: EffectProtocol, store: Store, tools: ToolSet) -> None:
        self._protocol = protocol
        self._store = store
        self._tools = tools

    async def apply(self, source: str, adapter: ReceivesWebhooks, event: ProviderEvent) -> Applied:
        """Applies one verified event of adapter `source` (raises Replayed or Busy)."""
        now = self._protocol.now()
        if not await self._store.claim_provider_event(source, event.event_id, event.action_id, event.kind.value, now):
            raise Replayed(event.event_id)
        try:
            return await self._apply(source, adapter, event)
        except BaseException:
            await self._store.forget_provider_event(source, event.event_id)
            raise

    async def _apply(self, source: str, adapter: ReceivesWebhooks, event: ProviderEvent) -> Applied:
        if not event.action_id or event.kind is EventKind.OTHER:
            return Applied.UNMATCHED if not event.action_id else Applied.IGNORED
        leased = await self._protocol.try_lease(event.action_id)
        if leased is None:
            if await self._store.get(event.action_id) is None:
                return Applied.UNMATCHED
            raise Busy(event.action_id)
        if event.kind.settles:
            return await self._settle(leased, adapter, event)
        if not t.allows(leased.state, t.ProviderNote.name):
            await self._protocol.release(leased)
            raise Busy(event.action_id)  # a refund before its payment settled here: later
        detail = ", ".join(f"{k}={v}" for k, v in sorted(event.detail.items()) if v not in (None, ""))
        note = t.ProviderNote(source=source, event_id=event.event_id, kind=event.kind.value, detail=detail)
        await self._protocol.commit(leased, note)
        return Applied.NOTED

    async def _settle(self, leased: ActionRecord, adapter: ReceivesWebhooks, event: ProviderEvent) -> Applied:
        if not t.allows(leased.state, t.Observed.name):
            await self._protocol.release(leased)
            return Applied.IGNORED
        tool = self._tools.get(leased.tool)
        observation = adapter.observe_event(event, tool.action_call(leased))
        observation = replace(observation, evidence={**observation.evidence, "source": "webhook"})
        settled = await self._protocol.commit(leased, t.Observed(observation, read_at=self._protocol.now()))
        log.info(
            "webhook %s (%s) moved %s from %s to %s",
            event.event_id,
            event.type,
            leased.action_id,
            leased.state.value,
            settled.state.value,
        )
        return Applied.SETTLED if settled.state is not leased.state else Applied.IGNORED
