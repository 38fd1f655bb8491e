"""What the transitions know of the tool, its provider and the gateway (`Policy`), and the one
rule of when absence may be proved (`absence_provable_at`; `provider_done_by` is where its
consistency window starts). Every path that can record NOT_FOUND from a read goes through it: the
driver's read-backs, Verify, the reconciler's drives and a webhook's failure event all apply an
`Observed` event, whose step compares the read's sent time with `absence_provable_at`."""

from __future__ import annotations

from dataclasses import dataclass

from effectgate.gateway.model import ActionRecord

# Pause before a same-key retry at a deduplicating provider (409 "key in use" needs a moment).
RETRY_PAUSE = 0.2


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
    # How long the provider may go on applying a request after our call ended (its connection
    # closed or timed out): the adapter's `keeps_processing`, or the tool's.
    keeps_processing: float = 0.0
    dedups_on_key: bool = False
    # How long the provider remembers a key; None: as long as we need.
    key_retention: float | None = None
    # Distinct principals whose approvals move an action out of AWAITING_APPROVAL.
    approvals: int = 1


def provider_done_by(record: ActionRecord, policy: Policy) -> float:
    """The latest moment the provider may still apply the last attempt: when our call ended
    (timed out, lost its answer, or was never made) or, that moment unknown (a crash, a worker
    cut off from the store), the end of its budget `dispatched_at + attempt_timeout` — plus how
    long the provider may go on processing after the connection closed."""
    if record.attempt_ended_at is not None:
        ended = record.attempt_ended_at
    else:
        ended = (record.dispatched_at or 0.0) + policy.attempt_timeout
    return ended + policy.keeps_processing


def absence_provable_at(record: ActionRecord, policy: Policy) -> float:
    """The earliest time a `not_found` read may prove absence: the read must be *sent* at or
    after this (a read sent earlier may be answered from state older than the effect)."""
    return provider_done_by(record, policy) + policy.consistency_window
