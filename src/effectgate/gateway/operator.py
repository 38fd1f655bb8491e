"""What operators do to actions: approve, reconcile an UNKNOWN, grant a bypass.

Each is idempotent where it can be (a second approval returns the same record) and recorded as a
note on the action. Each takes the action's lease first, so it cannot race a worker driving it.
"""

from __future__ import annotations

import asyncio

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.config import Bypass
from effectgate.gateway.domain import ActionRecord, NextStep, State
from effectgate.gateway.errors import InFlight, InvalidRequest, PolicyConflict
from effectgate.gateway.protocol import EffectProtocol

APPROVAL_RACE_POLLS = 200
RESOLUTIONS = {
    State.CONFIRMED: Outcome.CONFIRMED,
    State.REJECTED: Outcome.NOT_FOUND,
    State.NOT_FOUND: Outcome.NOT_FOUND,
}


class Operations:
    def __init__(self, protocol: EffectProtocol) -> None:
        self.protocol = protocol

    async def approve(self, tenant: str, action_id: str, who: str, note: str) -> ActionRecord:
        # Two clicks may race: the loser waits for the winner's short write, then sees the
        # action approved and changes nothing.
        for _ in range(APPROVAL_RACE_POLLS):
            record = await self.protocol.get(tenant, action_id)
            if record.state is not State.AWAITING_APPROVAL:
                return record  # approving twice (or after the fact) changes nothing
            leased = await self.protocol.try_lease(action_id)
            if leased is not None:
                break
            await asyncio.sleep(0.01)
        else:
            raise InFlight(action_id, retry_after=0.5)
        if leased.state is not State.AWAITING_APPROVAL:
            return await self._release(leased)
        approved = leased.evolve(
            state=State.PLANNED,
            next_step=NextStep.NONE,
            reason=f"approved by {who}",
            notes=(*leased.notes, f"approved by {who}: {note}".rstrip(": ")),
        )
        released = await self._release(approved)
        self.protocol.work_ready.set()  # the reconciler dispatches it unless an agent does first
        return released

    async def reconcile(
        self, tenant: str, action_id: str, resolution: State, who: str, note: str, external_id: str
    ) -> ActionRecord:
        if resolution not in RESOLUTIONS:
            raise InvalidRequest([("resolution", "must be CONFIRMED, REJECTED or NOT_FOUND")])
        if not note.strip():
            raise InvalidRequest([("note", "say what evidence settles the action")])
        record = await self.protocol.get(tenant, action_id)
        if record.state not in (State.UNKNOWN, State.DISPATCHED):
            raise PolicyConflict(
                f"action {action_id} is {record.state.value}; only UNKNOWN actions are reconciled",
                reason="NOT_UNKNOWN",
            )
        leased = await self.protocol.lease(action_id)
        now = self.protocol.clock()
        evidence = {"operator": who, "note": note, "external_id": external_id}
        receipt = leased.receipt
        if resolution is State.CONFIRMED and external_id:
            receipt = Receipt(external_id=external_id, result={"reconciled_by": who}, at=now)
        resolved = leased.evolve(
            state=resolution,
            receipt=receipt,
            observation=Observation(RESOLUTIONS[resolution], detail=f"operator: {note}", evidence=evidence, at=now),
            reason=f"reconciled by {who}",
            next_step=NextStep.DISPATCH if resolution is State.NOT_FOUND else NextStep.NONE,
            next_check_at=None,
            notes=(*leased.notes, f"reconciled {resolution.value} by {who}: {note}"),
        )
        return await self._release(resolved)

    async def grant_bypass(self, tenant: str, action_id: str, who: str, note: str) -> ActionRecord:
        record = await self.protocol.get(tenant, action_id)
        tool = self.protocol.tools.get(record.tool)
        if tool.config.bypass is not Bypass.OPERATOR:
            raise PolicyConflict(f"tool {record.tool} does not allow bypass", reason="BYPASS_NOT_ALLOWED")
        if not record.state.terminal:
            raise PolicyConflict(
                f"action {action_id} is {record.state.value}; bypass is for settled actions",
                reason="NOT_SETTLED",
            )
        if not note.strip():
            raise InvalidRequest([("note", "say why a second effect is wanted")])
        leased = await self.protocol.lease(action_id)
        granted = leased.evolve(bypass_granted=True, notes=(*leased.notes, f"bypass granted by {who}: {note}"))
        return await self._release(granted)

    async def _release(self, record: ActionRecord) -> ActionRecord:
        return await self.protocol.driver.release(record)
