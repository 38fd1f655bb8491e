"""What each event writes: `apply(record, event, now, policy) -> record`, a pure function of the
stored record, what just happened (an event), the time and the tool's policy, one step function a
kind of event. `apply` refuses what the table (`table`) does not allow, before and after the step.
"""

from __future__ import annotations

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.core.transitions import events as e
from effectgate.gateway.core.transitions.policy import RETRY_PAUSE, Policy, absence_provable_at, provider_done_by
from effectgate.gateway.core.transitions.table import IllegalTransition, allows, check
from effectgate.gateway.model import ActionRecord, NextStep, State

RESOLUTIONS = {
    State.CONFIRMED: Outcome.CONFIRMED,
    State.REJECTED: Outcome.NOT_FOUND,
    State.NOT_FOUND: Outcome.NOT_FOUND,
}


def apply(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    """The record after `event`; raises IllegalTransition when the state does not allow it."""
    if not allows(record.state, event.name):
        raise IllegalTransition(
            record.state, event.name, f"{event.name} is not allowed in {record.state.value} ({record.action_id})"
        )
    result = _STEPS[type(event)](record, event, now, policy)
    check(record.state, event, result.state)
    return result


# -- the steps -------------------------------------------------------------------------------------


def _dispatch(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Dispatch)
    return record.evolve(
        adapter=event.adapter or record.adapter,
        state=State.DISPATCHED,
        attempts=record.attempts + 1,
        dispatched_at=now,
        attempt_ended_at=None,
        checks=0,
        reason="dispatched",
        next_step=NextStep.NONE,
        next_check_at=None,
    )


def _not_sent(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    return record.evolve(reason="no time left to send", attempt_ended_at=now)


def _answered(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Answered)
    return record.evolve(state=State.CONFIRMED, receipt=event.receipt, reason="receipt", next_step=NextStep.NONE)


def _refused(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Refused)
    return record.evolve(
        state=State.REJECTED,
        reason=f"rejected by provider: {event.message}",
        receipt=Receipt(external_id="", result={"code": event.code, "error": event.message, **event.details}),
    )


def _refused_before_acting(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.RefusedBeforeActing)
    # A pause the provider asked for is stored: no worker sends again before it has passed.
    not_before = None if event.retry_after is None else now + event.retry_after
    if event.over_doubt:
        # The earlier attempt ended before this retry was sent: counting from now errs long.
        return record.evolve(
            reason=f"provider refused a retry before acting: {event.message}; the earlier attempt is still in doubt",
            attempt_ended_at=now,
            next_check_at=not_before,
        )
    return record.evolve(
        state=State.NOT_FOUND,
        reason=f"provider refused before acting: {event.message}",
        next_step=NextStep.DISPATCH,
        next_check_at=not_before,
    )


def _ambiguous(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Ambiguous)
    return record.evolve(reason=f"ambiguous: {event.detail}", attempt_ended_at=now)


def _observed(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    """A read-back becomes a state. DISPATCHED comes back when absence is not yet proven."""
    assert isinstance(event, e.Observed)
    obs = event.observation
    checks = record.checks + 1
    if obs.outcome is Outcome.CONFIRMED:
        return record.evolve(
            state=State.CONFIRMED,
            receipt=obs.receipt or record.receipt,
            observation=obs,
            checks=checks,
            reason=f"confirmed by read-back: {obs.detail}".rstrip(": "),
            next_step=NextStep.NONE,
            next_check_at=None,
        )
    if obs.outcome is Outcome.NOT_FOUND:
        read_at = now if event.read_at is None else event.read_at
        if read_at >= absence_provable_at(record, policy):
            since = read_at - (provider_done_by(record, policy) - policy.keeps_processing)
            wait = f"{policy.keeps_processing:g}s to finish + window {policy.consistency_window:g}s"
            return record.evolve(
                state=State.NOT_FOUND,
                observation=obs,
                checks=checks,
                reason=f"not found {since:.1f}s after the attempt ended ({wait})",
                next_step=NextStep.DISPATCH,
                next_check_at=None,
            )
        return record.evolve(
            state=State.DISPATCHED,
            observation=obs,
            checks=checks,
            reason="not found yet, inside the consistency window",
        )
    delay = min(policy.recheck_min * 2 ** min(record.checks, 20), policy.recheck_max)
    return record.evolve(
        state=State.UNKNOWN,
        observation=obs,
        checks=checks,
        reason=obs.detail or "read-back inconclusive",
        next_step=NextStep.RECHECK if policy.has_read_api else NextStep.OPERATOR,
        next_check_at=now + delay,
    )


def _park(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    return record.evolve(
        state=State.UNKNOWN,
        reason="not found yet, inside the consistency window; re-checked when it closes",
        next_step=NextStep.RECHECK,
        next_check_at=max(absence_provable_at(record, policy), now + RETRY_PAUSE),
    )


def _approve(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    """Counts one distinct principal; the last one needed moves the action to PLANNED. An
    approval given under another policy version re-binds the action to it, and the approvals
    given under the old one no longer count."""
    assert isinstance(event, e.Approve)
    approvals, version = record.approvals, record.policy_version
    if event.policy_version and event.policy_version != version:
        approvals, version = (), event.policy_version
    if event.who not in approvals:
        approvals = (*approvals, event.who)
    note = f"approved by {event.who}: {event.note}".rstrip(": ")
    if len(approvals) < policy.approvals:
        return record.evolve(
            approvals=approvals,
            policy_version=version,
            reason=f"approved by {', '.join(approvals)} ({len(approvals)} of {policy.approvals})",
            notes=(*record.notes, note),
        )
    return record.evolve(
        state=State.PLANNED,
        approvals=approvals,
        policy_version=version,
        next_step=NextStep.NONE,
        reason=f"approved by {', '.join(approvals)}",
        notes=(*record.notes, note),
    )


def _deny(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Deny)
    reason = f"denied by {event.who}: {event.note}".rstrip(": ")
    return record.evolve(state=State.REJECTED, next_step=NextStep.NONE, reason=reason, notes=(*record.notes, reason))


def _expire(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Expire)
    reason = f"approval expired after {span(event.ttl)}"
    return record.evolve(state=State.REJECTED, next_step=NextStep.NONE, reason=reason, notes=(*record.notes, reason))


def _reapprove(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Reapprove)
    reason = "the tool's policy changed after the approval; it needs a new approval"
    return record.evolve(
        state=State.AWAITING_APPROVAL,
        approvals=(),
        policy_version=event.policy_version,
        next_step=NextStep.APPROVE,
        reason=reason,
        notes=(*record.notes, reason),
    )


def span(seconds: float) -> str:
    """A duration as people write it in the config: 10m, 2h, 1d, 90s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _reconcile(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.Reconcile)
    if event.resolution not in RESOLUTIONS:
        raise IllegalTransition(
            record.state, event.name, f"an operator cannot resolve an action as {event.resolution.value}"
        )
    evidence = {"operator": event.who, "note": event.note, "external_id": event.external_id}
    receipt = record.receipt
    if event.resolution is State.CONFIRMED and event.external_id:
        receipt = Receipt(external_id=event.external_id, result={"reconciled_by": event.who}, at=now)
    return record.evolve(
        state=event.resolution,
        receipt=receipt,
        observation=Observation(
            RESOLUTIONS[event.resolution], detail=f"operator: {event.note}", evidence=evidence, at=now
        ),
        reason=f"reconciled by {event.who}",
        next_step=NextStep.DISPATCH if event.resolution is State.NOT_FOUND else NextStep.NONE,
        next_check_at=None,
        notes=(*record.notes, f"reconciled {event.resolution.value} by {event.who}: {event.note}"),
    )


def _grant_bypass(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.GrantBypass)
    return record.evolve(bypass_granted=True, notes=(*record.notes, f"bypass granted by {event.who}: {event.note}"))


def _provider_note(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, e.ProviderNote)
    note = f"{event.kind} reported by {event.source} (event {event.event_id})"
    return record.evolve(notes=(*record.notes, f"{note}: {event.detail}" if event.detail else note))


def _use_bypass(record: ActionRecord, event: e.Event, now: float, policy: Policy) -> ActionRecord:
    if not record.bypass_granted:
        raise IllegalTransition(record.state, event.name, f"{record.action_id} has no bypass grant")
    generation = record.generation + 1
    return record.evolve(
        generation=generation,
        state=State.PLANNED,
        bypass_granted=False,
        receipt=None,
        observation=None,
        reason="operator-granted bypass",
        notes=(*record.notes, f"bypass used at generation {generation}"),
    )


_STEPS = {
    e.Dispatch: _dispatch,
    e.NotSent: _not_sent,
    e.Answered: _answered,
    e.Refused: _refused,
    e.RefusedBeforeActing: _refused_before_acting,
    e.Ambiguous: _ambiguous,
    e.Observed: _observed,
    e.Park: _park,
    e.Approve: _approve,
    e.Deny: _deny,
    e.Expire: _expire,
    e.Reapprove: _reapprove,
    e.Reconcile: _reconcile,
    e.GrantBypass: _grant_bypass,
    e.ProviderNote: _provider_note,
    e.UseBypass: _use_bypass,
}
