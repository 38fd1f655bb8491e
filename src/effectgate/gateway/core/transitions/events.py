"""The events of the action state machine: what can happen to an action (`transitions` says
what each one does to it, and from which states)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from effectgate.adapters.base import Observation, Receipt
from effectgate.gateway.model import ActionIdentity, State


@dataclass(frozen=True)
class Event:
    name: ClassVar[str] = ""


@dataclass(frozen=True)
class Claim(Event):
    """First Execute of an action. `send_now`: inserted already DISPATCHED (attempt 1, with the
    lease), so the intent is durable in the same write that claims it."""

    name: ClassVar[str] = "claim"
    identity: ActionIdentity
    action_id: str
    payload_type: str
    payload: bytes
    fingerprint: str
    owner: str
    approval: bool = False
    send_now: bool = False
    # W3C traceparent of the Execute that creates the action: later spans link back to it.
    trace_parent: str = ""
    # The tool's policy version when the action is created (what an approval binds to).
    policy_version: str = ""
    # The adapter instance the tool sends through (recorded on the action: see `Dispatch`).
    adapter: str = ""


@dataclass(frozen=True)
class Dispatch(Event):
    """About to send attempt n (committed before the request leaves) through `adapter`."""

    name: ClassVar[str] = "dispatch"
    # The adapter instance sending it ("": keep the one recorded): its webhooks alone may settle it.
    adapter: str = ""


@dataclass(frozen=True)
class NotSent(Event):
    """Marked DISPATCHED, but no time was left to send: nothing went out."""

    name: ClassVar[str] = "not_sent"


@dataclass(frozen=True)
class Answered(Event):
    """The provider answered with a receipt."""

    name: ClassVar[str] = "receipt"
    receipt: Receipt


@dataclass(frozen=True)
class Refused(Event):
    """A definitive refusal: nothing happened and nothing will (declined card)."""

    name: ClassVar[str] = "refused"
    code: str
    message: str
    details: dict[str, object]


@dataclass(frozen=True)
class RefusedBeforeActing(Event):
    """Refused before acting (401, 429, 503): nothing happened; a later retry is safe."""

    name: ClassVar[str] = "refused_before_acting"
    message: str
    retry_after: float | None = None
    # The refused request was a same-key retry over an attempt still in doubt: the refusal says
    # nothing of that attempt, which the provider may still apply, so it proves no absence.
    over_doubt: bool = False


@dataclass(frozen=True)
class Ambiguous(Event):
    """Timeout, reset, 5xx, key in use: maybe an effect. Verification decides."""

    name: ClassVar[str] = "ambiguous"
    detail: str


@dataclass(frozen=True)
class Observed(Event):
    """A read-back of the provider."""

    name: ClassVar[str] = "observed"
    observation: Observation
    # When the read was sent: it proves absence only if sent after the window closed (the
    # provider may have answered from a state older than its reply). None: the event's `now`.
    read_at: float | None = None


@dataclass(frozen=True)
class Park(Event):
    """Not found yet inside the consistency window, and no time to wait it out."""

    name: ClassVar[str] = "park"


@dataclass(frozen=True)
class Approve(Event):
    """One principal signs off; the action leaves AWAITING_APPROVAL once the tool's number of
    distinct principals have. `policy_version`: the tool's policy now (it may re-bind the action)."""

    name: ClassVar[str] = "approve"
    who: str
    note: str
    policy_version: str = ""


@dataclass(frozen=True)
class Deny(Event):
    """A person says no: the action is REJECTED with their reason and never sent."""

    name: ClassVar[str] = "deny"
    who: str
    note: str


@dataclass(frozen=True)
class Expire(Event):
    """Nobody decided within the tool's approval_ttl: REJECTED, never sent."""

    name: ClassVar[str] = "expire"
    ttl: float


@dataclass(frozen=True)
class Reapprove(Event):
    """Approved under a policy the tool no longer has, and not yet sent: it waits for a new approval."""

    name: ClassVar[str] = "reapprove"
    policy_version: str


@dataclass(frozen=True)
class Reconcile(Event):
    """An operator settles an action with evidence of their own."""

    name: ClassVar[str] = "reconcile"
    resolution: State
    who: str
    note: str
    external_id: str = ""


@dataclass(frozen=True)
class GrantBypass(Event):
    name: ClassVar[str] = "grant_bypass"
    who: str
    note: str


@dataclass(frozen=True)
class UseBypass(Event):
    """An Execute with `bypass` and a grant: a new generation, a new provider key."""

    name: ClassVar[str] = "use_bypass"


@dataclass(frozen=True)
class ProviderNote(Event):
    """The provider reported something that happened to a settled effect (a refund, a dispute):
    recorded in the action's history, the state stays. Today the history is the record's notes;
    the event carries what an action-history row needs (source, event id, kind, detail)."""

    name: ClassVar[str] = "provider_note"
    source: str
    event_id: str
    kind: str
    detail: str = ""
