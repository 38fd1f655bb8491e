"""The action state machine, in one place and with no I/O.

Every change of an action is `apply(record, event, now, policy) -> record`: a pure function of
the stored record, what just happened (an event), the time and the tool's policy. `EDGES` lists
every allowed (state, event, state) triple; `apply` refuses anything else, so the table is the
whole truth (docs/protocol.md's diagram is rendered from it by `mermaid()` and a test keeps the
two equal). What the driver does next is decided, also purely, in `moves`.

Who writes what: the driver records its own events (dispatch, receipt, refusal, read-back, park);
the protocol creates actions and uses bypass grants; operators approve, reconcile and grant.
Lease bookkeeping (renewal and release) is not a state change and lives in `stamped`/`released`.
"""

from __future__ import annotations

from dataclasses import dataclass

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.core.events import (
    Ambiguous,
    Answered,
    Approve,
    Claim,
    Deny,
    Dispatch,
    Event,
    Expire,
    GrantBypass,
    NotSent,
    Observed,
    Park,
    ProviderNote,
    Reapprove,
    Reconcile,
    Refused,
    RefusedBeforeActing,
    UseBypass,
)
from effectgate.gateway.model import ActionRecord, NextStep, State

__all__ = [
    "EDGES",
    "RESOLUTIONS",
    "RETRY_PAUSE",
    "TABLE",
    "Ambiguous",
    "Answered",
    "Approve",
    "Claim",
    "Deny",
    "Dispatch",
    "Event",
    "Expire",
    "GrantBypass",
    "IllegalTransition",
    "NotSent",
    "Observed",
    "Park",
    "Policy",
    "ProviderNote",
    "Reapprove",
    "Reconcile",
    "Refused",
    "RefusedBeforeActing",
    "UseBypass",
    "allows",
    "apply",
    "create",
    "mermaid",
    "released",
    "stamped",
    "window_end",
    "window_start",
]

# Pause before a same-key retry at a deduplicating provider (409 "key in use" needs a moment).
RETRY_PAUSE = 0.2


class IllegalTransition(Exception):
    """An event that the action's state does not allow: a bug in the caller, never data (callers
    check `allows` first). The RPC layer answers it FAILED_PRECONDITION (rpc/status.py)."""

    def __init__(self, state: State | None, event: str, message: str) -> None:
        super().__init__(message)
        # The state the event met (None: the action did not exist) and the event's name.
        self.state = state
        self.event = event


@dataclass(frozen=True)
class Policy:
    """What the transitions need to know about the tool, its provider and the gateway."""

    lease_ttl: float
    recheck_min: float
    recheck_max: float
    consistency_window: float
    has_read_api: bool = True
    # One provider call's budget: after a crash, the call may have committed until this long
    # after the dispatch.
    attempt_timeout: float = 0.0
    dedups_on_key: bool = False
    # How long the provider remembers a key; None: as long as we need.
    key_retention: float | None = None
    # Distinct principals whose approvals move an action out of AWAITING_APPROVAL.
    approvals: int = 1


# -- the table -----------------------------------------------------------------------------------

P, D, C, R, N, U, A = (
    State.PLANNED,
    State.DISPATCHED,
    State.CONFIRMED,
    State.REJECTED,
    State.NOT_FOUND,
    State.UNKNOWN,
    State.AWAITING_APPROVAL,
)
# The table: from-state, event, every state the event may lead to ("-": the action did not exist).
TABLE = """
-                  claim                  PLANNED DISPATCHED AWAITING_APPROVAL
AWAITING_APPROVAL  approve                PLANNED AWAITING_APPROVAL
AWAITING_APPROVAL  deny                   REJECTED
AWAITING_APPROVAL  expire                 REJECTED
PLANNED            reapprove              AWAITING_APPROVAL
PLANNED            dispatch               DISPATCHED
NOT_FOUND          dispatch               DISPATCHED
DISPATCHED         dispatch               DISPATCHED
DISPATCHED         not_sent               DISPATCHED
DISPATCHED         receipt                CONFIRMED
DISPATCHED         refused                REJECTED
DISPATCHED         refused_before_acting  NOT_FOUND
DISPATCHED         ambiguous              DISPATCHED
DISPATCHED         observed               CONFIRMED NOT_FOUND DISPATCHED UNKNOWN
UNKNOWN            observed               CONFIRMED NOT_FOUND DISPATCHED UNKNOWN
DISPATCHED         park                   UNKNOWN
DISPATCHED         reconcile              CONFIRMED REJECTED NOT_FOUND
UNKNOWN            reconcile              CONFIRMED REJECTED NOT_FOUND
CONFIRMED          grant_bypass           CONFIRMED
CONFIRMED          provider_note          CONFIRMED
REJECTED           grant_bypass           REJECTED
CONFIRMED          use_bypass             PLANNED
REJECTED           use_bypass             PLANNED
"""
# (from, event, to); `None` as from: the action did not exist.
EDGES: frozenset[tuple[State | None, str, State]] = frozenset(
    (None if src == "-" else State(src), name, State(dst))
    for src, name, *targets in (line.split() for line in TABLE.strip().splitlines())
    for dst in targets
)
_FROM: dict[str, frozenset[State]] = {}
for _src, _name, _ in EDGES:
    if _src is not None:
        _FROM[_name] = _FROM.get(_name, frozenset()) | {_src}
_NOWHERE: frozenset[State] = frozenset()


def allows(state: State, event: str) -> bool:
    """Whether the table lets an action in `state` take `event` (an event's `name`, e.g.
    `Reconcile.name`). `apply` may still refuse what the event carries (a resolution, a grant)."""
    return state in _FROM.get(event, _NOWHERE)


RESOLUTIONS = {
    State.CONFIRMED: Outcome.CONFIRMED,
    State.REJECTED: Outcome.NOT_FOUND,
    State.NOT_FOUND: Outcome.NOT_FOUND,
}


def create(event: Claim, now: float, policy: Policy) -> ActionRecord:
    """The record a first Execute inserts (insert-if-absent: the claim itself)."""
    if event.approval:
        state, step, owner, expires = A, NextStep.APPROVE, "", 0.0
    else:
        state, step, owner, expires = (D if event.send_now else P), NextStep.NONE, event.owner, now + policy.lease_ttl
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
    )
    if state is D:
        record = record.evolve(attempts=1, dispatched_at=now, reason="dispatched")
    _check(None, event, record.state)
    return record


def apply(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    """The record after `event`; raises IllegalTransition when the state does not allow it."""
    if not allows(record.state, event.name):
        raise IllegalTransition(
            record.state, event.name, f"{event.name} is not allowed in {record.state.value} ({record.action_id})"
        )
    result = _STEPS[type(event)](record, event, now, policy)
    _check(record.state, event, result.state)
    return result


def _check(src: State | None, event: Event, dst: State) -> None:
    if (src, event.name, dst) not in EDGES:
        raise IllegalTransition(src, event.name, f"{src} --{event.name}--> {dst.value} is not in the table")


# -- the steps -------------------------------------------------------------------------------------


def _dispatch(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    return record.evolve(
        state=D,
        attempts=record.attempts + 1,
        dispatched_at=now,
        attempt_ended_at=None,
        checks=0,
        reason="dispatched",
        next_step=NextStep.NONE,
        next_check_at=None,
    )


def _not_sent(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    return record.evolve(reason="no time left to send", attempt_ended_at=now)


def _answered(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Answered)
    return record.evolve(state=C, receipt=event.receipt, reason="receipt", next_step=NextStep.NONE)


def _refused(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Refused)
    return record.evolve(
        state=R,
        reason=f"rejected by provider: {event.message}",
        receipt=Receipt(external_id="", result={"code": event.code, "error": event.message, **event.details}),
    )


def _refused_before_acting(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, RefusedBeforeActing)
    # A pause the provider asked for is stored: no worker sends again before it has passed.
    not_before = None if event.retry_after is None else now + event.retry_after
    return record.evolve(
        state=N,
        reason=f"provider refused before acting: {event.message}",
        next_step=NextStep.DISPATCH,
        next_check_at=not_before,
    )


def _ambiguous(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Ambiguous)
    return record.evolve(reason=f"ambiguous: {event.detail}", attempt_ended_at=now)


def _observed(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    """A read-back becomes a state. DISPATCHED comes back when absence is not yet proven."""
    assert isinstance(event, Observed)
    obs = event.observation
    checks = record.checks + 1
    if obs.outcome is Outcome.CONFIRMED:
        return record.evolve(
            state=C,
            receipt=obs.receipt or record.receipt,
            observation=obs,
            checks=checks,
            reason=f"confirmed by read-back: {obs.detail}".rstrip(": "),
            next_step=NextStep.NONE,
            next_check_at=None,
        )
    if obs.outcome is Outcome.NOT_FOUND:
        read_at = now if event.read_at is None else event.read_at
        if read_at >= window_end(record, policy):
            since = read_at - window_start(record, policy)
            return record.evolve(
                state=N,
                observation=obs,
                checks=checks,
                reason=f"not found {since:.1f}s after the attempt (window {policy.consistency_window:g}s)",
                next_step=NextStep.DISPATCH,
                next_check_at=None,
            )
        return record.evolve(
            state=D, observation=obs, checks=checks, reason="not found yet, inside the consistency window"
        )
    delay = min(policy.recheck_min * 2 ** min(record.checks, 20), policy.recheck_max)
    return record.evolve(
        state=U,
        observation=obs,
        checks=checks,
        reason=obs.detail or "read-back inconclusive",
        next_step=NextStep.RECHECK if policy.has_read_api else NextStep.OPERATOR,
        next_check_at=now + delay,
    )


def _park(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    return record.evolve(
        state=U,
        reason="not found yet, inside the consistency window; re-checked when it closes",
        next_step=NextStep.RECHECK,
        next_check_at=max(window_end(record, policy), now + RETRY_PAUSE),
    )


def _approve(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    """Counts one distinct principal; the last one needed moves the action to PLANNED. An
    approval given under another policy version re-binds the action to it, and the approvals
    given under the old one no longer count."""
    assert isinstance(event, Approve)
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
        state=P,
        approvals=approvals,
        policy_version=version,
        next_step=NextStep.NONE,
        reason=f"approved by {', '.join(approvals)}",
        notes=(*record.notes, note),
    )


def _deny(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Deny)
    reason = f"denied by {event.who}: {event.note}".rstrip(": ")
    return record.evolve(state=R, next_step=NextStep.NONE, reason=reason, notes=(*record.notes, reason))


def _expire(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Expire)
    reason = f"approval expired after {span(event.ttl)}"
    return record.evolve(state=R, next_step=NextStep.NONE, reason=reason, notes=(*record.notes, reason))


def _reapprove(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Reapprove)
    reason = "the tool's policy changed after the approval; it needs a new approval"
    return record.evolve(
        state=A,
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


def _reconcile(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, Reconcile)
    if event.resolution not in RESOLUTIONS:
        raise IllegalTransition(
            record.state, event.name, f"an operator cannot resolve an action as {event.resolution.value}"
        )
    evidence = {"operator": event.who, "note": event.note, "external_id": event.external_id}
    receipt = record.receipt
    if event.resolution is C and event.external_id:
        receipt = Receipt(external_id=event.external_id, result={"reconciled_by": event.who}, at=now)
    return record.evolve(
        state=event.resolution,
        receipt=receipt,
        observation=Observation(
            RESOLUTIONS[event.resolution], detail=f"operator: {event.note}", evidence=evidence, at=now
        ),
        reason=f"reconciled by {event.who}",
        next_step=NextStep.DISPATCH if event.resolution is N else NextStep.NONE,
        next_check_at=None,
        notes=(*record.notes, f"reconciled {event.resolution.value} by {event.who}: {event.note}"),
    )


def _grant_bypass(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, GrantBypass)
    return record.evolve(bypass_granted=True, notes=(*record.notes, f"bypass granted by {event.who}: {event.note}"))


def _provider_note(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    assert isinstance(event, ProviderNote)
    note = f"{event.kind} reported by {event.source} (event {event.event_id})"
    return record.evolve(notes=(*record.notes, f"{note}: {event.detail}" if event.detail else note))


def _use_bypass(record: ActionRecord, event: Event, now: float, policy: Policy) -> ActionRecord:
    if not record.bypass_granted:
        raise IllegalTransition(record.state, event.name, f"{record.action_id} has no bypass grant")
    generation = record.generation + 1
    return record.evolve(
        generation=generation,
        state=P,
        bypass_granted=False,
        receipt=None,
        observation=None,
        reason="operator-granted bypass",
        notes=(*record.notes, f"bypass used at generation {generation}"),
    )


_STEPS = {
    Dispatch: _dispatch,
    NotSent: _not_sent,
    Answered: _answered,
    Refused: _refused,
    RefusedBeforeActing: _refused_before_acting,
    Ambiguous: _ambiguous,
    Observed: _observed,
    Park: _park,
    Approve: _approve,
    Deny: _deny,
    Expire: _expire,
    Reapprove: _reapprove,
    Reconcile: _reconcile,
    GrantBypass: _grant_bypass,
    ProviderNote: _provider_note,
    UseBypass: _use_bypass,
}


# -- lease bookkeeping (no state change) -----------------------------------------------------------


def stamped(record: ActionRecord, now: float, policy: Policy) -> ActionRecord:
    """The record as its holder writes it: a settled action releases the lease in the same
    write; anything else renews it."""
    if record.state.terminal:
        return record.evolve(updated_at=now, lease_owner="", lease_expires_at=0.0)
    return record.evolve(updated_at=now, lease_expires_at=now + policy.lease_ttl)


def released(record: ActionRecord, now: float) -> ActionRecord:
    return record.evolve(updated_at=now, lease_owner="", lease_expires_at=0.0)


def window_start(record: ActionRecord, policy: Policy) -> float:
    """The latest moment the provider may have committed the last attempt: when the call ended
    without an answer, or (that moment unknown, e.g. after a crash) the end of its budget."""
    if record.attempt_ended_at is not None:
        return record.attempt_ended_at
    return (record.dispatched_at or 0.0) + policy.attempt_timeout


def window_end(record: ActionRecord, policy: Policy) -> float:
    """A not-found read sent from here on proves absence."""
    return window_start(record, policy) + policy.consistency_window


# -- the diagram -----------------------------------------------------------------------------------

_ORDER = [None, A, P, D, C, R, N, U]


def mermaid() -> str:
    """The state diagram of docs/protocol.md, rendered from EDGES (self-loops included)."""
    lines = ["stateDiagram-v2"]
    for src, name, dst in sorted(EDGES, key=lambda e: (_ORDER.index(e[0]), e[1], _ORDER.index(e[2]))):
        left = "[*]" if src is None else src.value
        lines.append(f"    {left} --> {dst.value} : {name}")
    return "\n".join(lines)


if __name__ == "__main__":  # prints the diagram for docs/protocol.md
    print(mermaid())
