"""Notifications' shapes (docs/notifications.md): the kinds a sink may ask for, a notice (a fact
that is not an action event: a limit denial, a breaker opening, webhook forgeries) and a row of
the outbox (one notification for one sink)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from effectgate.gateway.model.domain import ActionRecord

# Of action events (read from the audit trail) ...
APPROVAL_WAITING = "approval_waiting"
APPROVAL_DECIDED = "approval_decided"
APPROVAL_EXPIRED = "approval_expired"
UNKNOWN_PARKED = "unknown_parked"
# ... and notices (written by the process that saw them).
LIMIT_DENIED = "limit_denied"
BREAKER_OPENED = "breaker_opened"
WEBHOOK_FORGERIES = "webhook_forgeries"
ACTION_KINDS = (APPROVAL_WAITING, APPROVAL_DECIDED, APPROVAL_EXPIRED, UNKNOWN_PARKED)
NOTICE_KINDS = (LIMIT_DENIED, BREAKER_OPENED, WEBHOOK_FORGERIES)
KINDS = ACTION_KINDS + NOTICE_KINDS


@dataclass(frozen=True)
class Notice:
    """A fact worth a notification that no action event records. `key` makes it one notice:
    the same key posted twice (an agent retrying a denied call) is one notification."""

    kind: str
    key: str
    tenant: str
    tool: str
    at: float
    action_id: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # The action as it was refused (a denied action is never stored): what it asked for.
    record: ActionRecord | None = None


@dataclass(frozen=True)
class Outgoing:
    """One notification for one sink, as the outbox keeps it until the sink takes it. `event_id`
    is the receiver's dedup key (Standard Webhooks' `webhook-id`); `body` the notification as JSON."""

    sink: str
    event_id: str
    tenant: str
    kind: str
    created_at: float
    body: str
    attempts: int = 0
    next_at: float = 0.0
    last_error: str = ""
    failed: bool = False
