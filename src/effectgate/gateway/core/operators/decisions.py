"""People's decisions on an action that waits for approval: approve, deny, and the expiry of
those nobody decided in time.

An approval binds to what the approver was shown: the payload's fingerprint and the tool's
policy version (both optional in the request; given, they must match, else APPROVAL_STALE). An
action created under a policy the tool no longer has is approved only by naming the current
version: the approver looked again. Each principal counts once (`approvals = N` needs N distinct
ones); approving again is a no-op that answers the action. Everything else that meets an action
that is no longer waiting is refused (NOT_AWAITING_APPROVAL): a late click is never recorded as
an approval. Each act leases the action first, so concurrent clicks are serialised: exactly one
decision wins, the others see the action decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.protocol.verbs import EffectProtocol
from effectgate.gateway.model import ActionRecord, InFlight, InvalidRequest, PolicyConflict, State

log = logging.getLogger("effectgate.decisions")
RACE_POLLS = 200
EXPIRY_BATCH = 100

# Checks an action before a decision: returns the record to answer without a change (a repeat),
# None to go ahead, or raises the refusal.
Check = Callable[[ActionRecord], ActionRecord | None]


class Decisions:
    def __init__(self, protocol: EffectProtocol) -> None:
        self.protocol = protocol

    async def approve(
        self, tenant: str, action_id: str, who: str, note: str, *, fingerprint: str = "", policy_version: str = ""
    ) -> tuple[ActionRecord, bool]:
        """(the action, whether this approval counted)."""

        def check(record: ActionRecord) -> ActionRecord | None:
            if who in record.approvals:
                return record  # the same principal again: idempotent, counts once
            if record.state is not State.AWAITING_APPROVAL:
                raise _not_waiting(record)
            if self._overdue(record):
                raise _not_waiting(record, "its approval_ttl has passed: it expires, nothing is sent")
            if fingerprint and fingerprint != record.fingerprint:
                raise PolicyConflict(
                    f"action {record.action_id} has payload {record.fingerprint}, not {fingerprint}: "
                    "look at it again before approving",
                    reason="APPROVAL_STALE",
                )
            current = self.protocol.tool(record.tool).policy_version
            if policy_version and policy_version != current:
                raise PolicyConflict(
                    f"the policy of tool {record.tool} is {current}, not {policy_version}: look at it again",
                    reason="APPROVAL_STALE",
                )
            if record.policy_version and record.policy_version != current and not policy_version:
                raise PolicyConflict(
                    f"the policy of tool {record.tool} changed while {record.action_id} waited "
                    f"({record.policy_version} -> {current}): approve again naming policy_version {current}",
                    reason="APPROVAL_STALE",
                )
            return None

        try:
            return await self._decide(
                tenant,
                action_id,
                check,
                lambda record: t.Approve(
                    who=who, note=note, policy_version=self.protocol.tool(record.tool).policy_version
                ),
            )
        except PolicyConflict:
            # A click after the TTL is refused even before the expiry job's next pass (found by
            # the stateful model): expire the action now, so the agent reads REJECTED at once.
            record = await self.protocol.get(tenant, action_id)
            ttl = self._ttl(record)
            if ttl is not None and record.state is State.AWAITING_APPROVAL and self._overdue(record):
                await self._expire(record, ttl)
            raise

    def _ttl(self, record: ActionRecord) -> float | None:
        return self.protocol.tool(record.tool).config.approval_ttl

    def _overdue(self, record: ActionRecord) -> bool:
        """Waited longer than its tool's approval_ttl (the expiry job's own test)."""
        ttl = self._ttl(record)
        return ttl is not None and record.created_at < self.protocol.now() - ttl

    async def deny(self, tenant: str, action_id: str, who: str, note: str) -> ActionRecord:
        if not note.strip():
            raise InvalidRequest([("note", "say why: the agent reads it as the reason")])

        def check(record: ActionRecord) -> ActionRecord | None:
            if record.state is not State.AWAITING_APPROVAL:
                raise _not_waiting(record)
            return None

        record, _ = await self._decide(tenant, action_id, check, lambda _: t.Deny(who=who, note=note))
        return record

    async def expire_due(self, ttls: Mapping[str, float]) -> int:
        """Expires the actions that waited longer than their tool's approval_ttl (on the
        protocol's clock: the store's); returns how many."""
        expired = 0
        for tool, ttl in ttls.items():
            while True:
                batch = await self.protocol.awaiting(tool, self.protocol.now() - ttl, EXPIRY_BATCH)
                for record in batch:
                    expired += await self._expire(record, ttl)
                if len(batch) < EXPIRY_BATCH:
                    break
        return expired

    async def _expire(self, record: ActionRecord, ttl: float) -> int:
        leased = await self.protocol.try_lease(record.action_id)
        if leased is None:
            return 0  # someone is deciding right now; the next pass looks again
        if leased.state is not State.AWAITING_APPROVAL or leased.created_at >= self.protocol.now() - ttl:
            await self.protocol.release(leased)
            return 0
        expired = await self.protocol.commit(leased, t.Expire(ttl=ttl))
        self.protocol.observer.approval_expired(expired)
        return 1

    async def _decide(
        self, tenant: str, action_id: str, check: Check, event_of: Callable[[ActionRecord], t.Event]
    ) -> tuple[ActionRecord, bool]:
        # Concurrent clicks: the loser waits for the winner's short write, then sees the outcome.
        for _ in range(RACE_POLLS):
            record = await self.protocol.get(tenant, action_id)
            unchanged = check(record)
            if unchanged is not None:
                return unchanged, False
            leased = await self.protocol.try_lease(action_id)
            if leased is not None:
                break
            await asyncio.sleep(0.01)
        else:
            raise InFlight(action_id, retry_after=0.5)
        try:
            unchanged = check(leased)
        except BaseException:
            await self.protocol.release(leased)
            raise
        if unchanged is not None:
            return await self.protocol.release(leased), False
        return await self.protocol.commit(leased, event_of(leased)), True


def _not_waiting(record: ActionRecord, why: str = "") -> PolicyConflict:
    state = why or f"is {record.state.value}"
    return PolicyConflict(
        f"action {record.action_id} {state}; only actions awaiting approval are decided",
        reason="NOT_AWAITING_APPROVAL",
    )
