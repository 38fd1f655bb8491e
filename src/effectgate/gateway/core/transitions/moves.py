"""What the driver does next: a pure decision from the record, the time, the budget and what the
last step found. The driver performs the move (`send`, `check`, `wait`, `park`, `stop`); the state
changes themselves are `transitions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from effectgate.adapters.base import Observation, Outcome
from effectgate.gateway.core.transitions import RETRY_PAUSE, Policy, RefusedBeforeActing, absence_provable_at
from effectgate.gateway.model import IN_DOUBT, UNSENT, ActionRecord, State

# Never start a provider call with less than this much of the lease or deadline left.
MIN_CALL_BUDGET = 0.05
# Back-off cap after refusals that name no pause (a plain NoEffectError).
REFUSAL_PAUSE_MAX = 5.0


@dataclass(frozen=True)
class Move:
    """The driver's next step. kind: send | check | wait | park | stop; `pause` comes first
    (send, wait); `rate_limited` on stop: the caller is told to come back after `pause`."""

    kind: Literal["send", "check", "wait", "park", "stop"]
    pause: float = 0.0
    rate_limited: bool = False


def refusal_pause(event: RefusedBeforeActing, refusals: int) -> float:
    """Never a burst: the provider's own pause, else an exponential back-off."""
    if event.retry_after is not None:
        return max(float(event.retry_after), RETRY_PAUSE)
    return min(RETRY_PAUSE * 2.0 ** max(refusals - 1, 0), REFUSAL_PAUSE_MAX)


def next_move(
    record: ActionRecord,
    *,
    now: float,
    deadline: float,
    sends_left: int,
    observed: Observation | None,
    refusal: RefusedBeforeActing | None,
    refusals: int,
    policy: Policy,
    same_key_retry: bool = True,
) -> Move:
    """`observed`: the read-back just applied (None if the last step was not one); `refusal`:
    the refusal the last send got; `refusals`: how many in a row; `same_key_retry`: False when
    an attempt in doubt may not be sent again with its key before it is proven absent (its
    approval was given under another policy: the retry could be the effect's first arrival)."""
    left = min(deadline, record.lease_expires_at) - now
    if record.state in UNSENT:
        pause = refusal_pause(refusal, refusals) if refusal is not None else 0.0
        # A provider's pause stored by an earlier refusal (this worker's or another's).
        not_before = record.next_check_at if record.state is State.NOT_FOUND else None
        held = not_before is not None and not_before > now
        if held:
            assert not_before is not None
            pause = max(pause, not_before - now)
        if sends_left <= 0 or left < pause + MIN_CALL_BUDGET:
            limited = held or (refusal is not None and refusal.retry_after is not None)
            return Move("stop", pause=pause, rate_limited=limited)
        return Move("send", pause=pause)
    if record.state in IN_DOUBT:
        if observed is None:
            if left < MIN_CALL_BUDGET and record.state is State.DISPATCHED:
                # The attempt outlived the caller's deadline: a read now could not prove absence
                # (the window starts when the provider is done), so the reconciler checks later.
                return Move("park")
            return Move("check")
        if record.state is State.UNKNOWN:
            return Move("stop")
        if (
            observed.outcome is Outcome.NOT_FOUND
            and same_key_retry
            and policy.dedups_on_key
            and within_key_retention(record, now, policy)
            and sends_left > 0
            and left > RETRY_PAUSE
        ):
            # Same key at a provider that deduplicates: a retry cannot double the effect and
            # usually answers with the stored receipt at once. After a refused retry (429 with
            # the earlier attempt still in doubt), the provider's pause comes first.
            pause = max(RETRY_PAUSE, refusal_pause(refusal, refusals)) if refusal is not None else RETRY_PAUSE
            if refusal is None or left > pause + MIN_CALL_BUDGET:
                return Move("send", pause=pause)
        pause = max(RETRY_PAUSE, min(absence_provable_at(record, policy) - now, policy.recheck_min))
        if left > pause + MIN_CALL_BUDGET:
            return Move("wait", pause=pause)
        return Move("park")
    return Move("stop")  # settled, or waiting for approval


def within_key_retention(record: ActionRecord, now: float, policy: Policy) -> bool:
    return policy.key_retention is None or now - record.created_at < policy.key_retention * 0.9


def reconciler_sends(record: ActionRecord, max_attempts: int) -> int:
    """The sends a drive with no agent asking (the reconciler's) may make: what is left of
    `max_attempts` for each generation so far, never a fresh budget. Without the bound, a
    provider that answers every same-key send ambiguously (Stripe replays a stored 500 for its
    key) would be sent to again after every proof of absence, for ever; with it the action
    rests in NOT_FOUND, which its agent's next Execute sends (docs/states.md). A PLANNED action
    is sent once at least: it is PLANNED again only by a person's new decision (approved again
    after its attempts were proven absent under a changed policy), and would otherwise linger
    PLANNED with a reconciler leasing it every pass (the simulator's seed 1591)."""
    left = max(0, max_attempts * (record.generation + 1) - record.attempts)
    return max(left, 1) if record.state is State.PLANNED else left
