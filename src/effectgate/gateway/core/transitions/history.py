"""An action's story: the `ActionEvent` each transition leaves behind (pure, no I/O).

Every write that changes an action carries the entry of the event that changed it, and the store
writes both in one transaction (`Store.update(record, event)`), so the story can neither miss a
state nor tell one that was never stored. What an entry keeps: who (operators' acts), their note,
and what was seen — the receipt's id, the refusal, the read-back's outcome and evidence. Never
the payload: the story is for people, and the payload is on the action (masked).
"""

from __future__ import annotations

from typing import Any

from effectgate.adapters.base import Observation
from effectgate.gateway.core import transitions as t
from effectgate.gateway.model import ActionEvent, ActionRecord


def entry(event: t.Event, after: ActionRecord, now: float) -> ActionEvent:
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


def _who(event: t.Event) -> tuple[str, str]:
    if isinstance(event, t.Approve | t.Deny | t.GrantBypass | t.Reconcile):
        return event.who, event.note
    return "", ""


def _detail(event: t.Event, after: ActionRecord) -> dict[str, Any]:
    detail: dict[str, Any] = {"reason": after.reason} if after.reason else {}
    if isinstance(event, t.Claim | t.Dispatch):
        detail["attempt"] = after.attempts
    elif isinstance(event, t.Answered):
        detail["external_id"] = event.receipt.external_id
    elif isinstance(event, t.Refused):
        detail["code"] = event.code
    elif isinstance(event, t.Observed):
        detail["observation"] = _observation(event.observation)
    elif isinstance(event, t.Reconcile):
        detail["resolution"] = event.resolution.value
        if event.external_id:
            detail["external_id"] = event.external_id
    elif isinstance(event, t.Approve):
        detail["approvals"] = list(after.approvals)
        detail["policy_version"] = after.policy_version
    elif isinstance(event, t.Expire):
        detail["ttl_seconds"] = event.ttl
    elif isinstance(event, t.UseBypass):
        detail["generation"] = after.generation
    return detail


def _observation(obs: Observation) -> dict[str, Any]:
    return {"outcome": obs.outcome.value, "detail": obs.detail, "evidence": obs.evidence}
