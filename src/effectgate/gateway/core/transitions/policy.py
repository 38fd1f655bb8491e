"""What the transitions know of the tool, its provider and the gateway (`Policy`), and the
consistency window it sets on a record (`window_start`, `window_end`: the steps and `moves` both
read it)."""

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
    dedups_on_key: bool = False
    # How long the provider remembers a key; None: as long as we need.
    key_retention: float | None = None
    # Distinct principals whose approvals move an action out of AWAITING_APPROVAL.
    approvals: int = 1


def window_start(record: ActionRecord, policy: Policy) -> float:
    """The latest moment the provider may have committed the last attempt: when the call ended
    without an answer, or (that moment unknown, e.g. after a crash) the end of its budget."""
    if record.attempt_ended_at is not None:
        return record.attempt_ended_at
    return (record.dispatched_at or 0.0) + policy.attempt_timeout


def window_end(record: ActionRecord, policy: Policy) -> float:
    """A not-found read sent from here on proves absence."""
    return window_start(record, policy) + policy.consistency_window
