"""What operators do to actions: approve or deny (core/operators/decisions.py), reconcile an UNKNOWN,
grant a bypass.

Each is idempotent where it can be (a second approval by the same principal returns the same
record) and recorded as a note on the action and an entry in its story. Each takes the action's
lease first, so it cannot race a worker driving it; the change itself is a transition
(`transitions.Approve`, `Deny`, `Reconcile`, `GrantBypass`) committed by the protocol in the
write that releases the lease. Which states allow each act is the transition table's
(`transitions.allows`), checked on the read and again under the lease: the answers here name
the refusal for people; `apply` would only raise IllegalTransition.
"""

from __future__ import annotations

from effectgate.gateway.config import Bypass
from effectgate.gateway.core import transitions as t
from effectgate.gateway.core.operators.decisions import Decisions
from effectgate.gateway.core.protocol.verbs import EffectProtocol
from effectgate.gateway.model import ActionRecord, InvalidRequest, PolicyConflict, State

RESOLUTIONS = tuple(t.RESOLUTIONS)
# How long a reconcile or a bypass grant waits for the gateway's own work on the action (the
# reconciler reading an UNKNOWN back, a drive writing its outcome) to hand the lease back, before
# it answers IN_FLIGHT: an operator's click should not fail because a read-back was running. (The
# RPC layer shortens it to the caller's deadline.)
LEASE_PATIENCE = 10.0


class Operations:
    def __init__(self, protocol: EffectProtocol) -> None:
        self.protocol = protocol
        self.decisions = Decisions(protocol)

    async def approve(
        self, tenant: str, action_id: str, who: str, note: str, *, fingerprint: str = "", policy_version: str = ""
    ) -> ActionRecord:
        record, _ = await self.decisions.approve(
            tenant, action_id, who, note, fingerprint=fingerprint, policy_version=policy_version
        )
        return record

    async def deny(self, tenant: str, action_id: str, who: str, note: str) -> ActionRecord:
        return await self.decisions.deny(tenant, action_id, who, note)

    async def reconcile(
        self,
        tenant: str,
        action_id: str,
        resolution: State,
        who: str,
        note: str,
        external_id: str,
        *,
        patience: float = LEASE_PATIENCE,
    ) -> ActionRecord:
        if resolution not in RESOLUTIONS:
            raise InvalidRequest([("resolution", "must be CONFIRMED, REJECTED or NOT_FOUND")])
        if not note.strip():
            raise InvalidRequest([("note", "say what evidence settles the action")])
        record = await self.protocol.get(tenant, action_id)
        if not t.allows(record.state, t.Reconcile.name):
            raise _not_unknown(record)
        leased = await self.protocol.lease(action_id, patience)
        if not t.allows(leased.state, t.Reconcile.name):  # settled between read and lease
            await self.protocol.release(leased)
            raise _not_unknown(leased)
        event = t.Reconcile(resolution=resolution, who=who, note=note, external_id=external_id)
        return await self.protocol.commit(leased, event)

    async def grant_bypass(
        self, tenant: str, action_id: str, who: str, note: str, *, patience: float = LEASE_PATIENCE
    ) -> ActionRecord:
        record = await self.protocol.get(tenant, action_id)
        if self.protocol.tool_config(record.tool).bypass is not Bypass.OPERATOR:
            raise PolicyConflict(
                f'tool {record.tool} does not allow bypass: set bypass = "operator" in [tools.{record.tool}] '
                "to let an operator grant a second effect",
                reason="BYPASS_NOT_ALLOWED",
            )
        if not t.allows(record.state, t.GrantBypass.name):
            raise _not_settled(record)
        if not note.strip():
            raise InvalidRequest([("note", "say why a second effect is wanted")])
        leased = await self.protocol.lease(action_id, patience)
        if not t.allows(leased.state, t.GrantBypass.name):  # a bypass was used between our read and our lease
            await self.protocol.release(leased)
            raise _not_settled(leased)
        return await self.protocol.commit(leased, t.GrantBypass(who=who, note=note))


def _not_unknown(record: ActionRecord) -> PolicyConflict:
    return PolicyConflict(
        f"action {record.action_id} is {record.state.value}; only UNKNOWN actions are reconciled",
        reason="NOT_UNKNOWN",
    )


def _not_settled(record: ActionRecord) -> PolicyConflict:
    return PolicyConflict(
        f"action {record.action_id} is {record.state.value}; bypass is for settled actions",
        reason="NOT_SETTLED",
    )
