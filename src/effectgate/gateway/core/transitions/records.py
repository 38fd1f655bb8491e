"""What a write carries besides its event's step (pure, no I/O): the first record (`create`, the
claim itself), the lease bookkeeping of every write (`stamped`, `released`), which is not a state
change, and the entry the event leaves in the action's story (`entry`).

The story: every write that changes an action carries the entry of the event that changed it, and
the store writes both in one transaction (`Store.update(record, event)`), so the story can neither
miss a state nor tell one that was never stored. What an entry keeps: who (operators' acts), their
note, and what was seen — the receipt's id, the refusal, the read-back's outcome and evidence.
Never the payload: the story is for people, and the payload is on the action (masked)."""

from __future__ import annotations

from typing import Any

from effectgate.adapters.base import Observation
from effectgate.gateway.core.transitions import events as e
from effectgate.gateway.core.transitions.events import Claim
from effectgate.gateway.core.transitions.policy import Policy
from effectgate.gateway.core.transitions.table import check
from effectgate.gateway.model import ActionEvent, ActionRecord, NextStep, State


def create(event: Claim, now: float, policy: Policy) -> ActionRecord:
    """The record a first Execute inserts (insert-if-absent: the claim itself)."""
    if event.approval:
        state, step, owner, expires = State.AWAITING_APPROVAL, NextStep.APPROVE, "", 0.0
    else:
        state, step, owner, expires = (
            (State.DISPATCHED if event.send_now else State.PLANNED),
            NextStep.NONE,
            event.owner,
            now + policy.lease_ttl,
        )
    record = ActionRecord.of(
        event.action_id,
        event.identity,
        payload_type=event.payload_type,
        payload=event.payload,
        fingerprint=event.fingerprint,
        state=state,
        next_step=step,
        created_at=now,
        updated_at=now,
        fence=1,
        lease_owner=owner,
        lease_expires_at=expires,
        trace_parent=event.trace_parent,
        policy_version=event.policy_version,
        adapter=event.adapter,
    )
    if state is State.DISPATCHED:
        record = record.evolve(attempts=1, dispatched_at=now, reason="dispatched")
    check(None, event, record.state)
    return record


def stamped(record: ActionRecord, now: float, policy: Policy) -> ActionRecord:
    """The record as its holder writes it: a settled action releases the lease in the same
    write; anything else renews it."""
    if record.state.terminal:
        return record.evolve(updated_at=now, lease_owner="", lease_expires_at=0.0)
    return record.evolve(updated_at=now, lease_expires_at=now + policy.lease_ttl)


def released(record: ActionRecord, now: float) -> ActionRecord:
    return record.evolve(updated_at=now, lease_owner="", lease_expires_at=0.0)


# -- the story ------------------------------------------------------------------------------


def entry(event: e.Event, after: ActionRecord, now: float) -> ActionEvent:
    """The story's entry for `event`, which left the action as `after`."""
    principal, note = _who(event)
    return ActionEvent(
        action_id=after.action_id,
        at=now,
        kind=event.name,
        state=after.state,
        principal=principal,
        note=note,
        detail=_detail(event, after),
    )


def _who(event: e.Event) -> tuple[str, str]:
    if isinstance(event, e.Approve | e.Deny | e.GrantBypass | e.Reconcile):
        return event.who, event.note
    return "", ""


def _detail(event: e.Event, after: ActionRecord) -> dict[str, Any]:
    detail: dict[str, Any] = {"reason": after.reason} if after.reason else {}
    if isinstance(event, e.Claim | e.Dispatch):
        detail["attempt"] = after.attempts
    elif isinstance(event, e.Answered):
        detail["external_id"] = event.receipt.external_id
    elif isinstance(event, e.Refused):
        detail["code"] = event.code
    elif isinstance(event, e.Observed):
        detail["observation"] = _observation(event.observation)
    elif isinstance(event, e.Reconcile):
        detail["resolution"] = event.resolution.value
        if event.external_id:
            detail["external_id"] = event.external_id
    elif isinstance(event, e.Approve):
        detail["approvals"] = list(after.approvals)
        detail["policy_version"] = after.policy_version
    elif isinstance(event, e.Expire):
        detail["ttl_seconds"] = event.ttl
    elif isinstance(event, e.UseBypass):
        detail["generation"] = after.generation
    return detail


def _observation(obs: Observation) -> dict[str, Any]:
    return {"outcome": obs.outcome.value, "detail": obs.detail, "evidence": obs.evidence}
