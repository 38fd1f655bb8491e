"""The records written outside an event's step: the first one (`create`, the claim itself) and
the lease bookkeeping of every write (`stamped`, `released`), which is not a state change."""

from __future__ import annotations

from effectgate.gateway.core.transitions.events import Claim
from effectgate.gateway.core.transitions.policy import Policy
from effectgate.gateway.core.transitions.table import check
from effectgate.gateway.model import ActionRecord, NextStep, State


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
