"""The action record and its states: the data the effect protocol and the stores share."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from effectgate.adapters.base import Observation, Receipt
from effectgate.gateway.model import keys


class State(enum.Enum):
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    PLANNED = "PLANNED"
    DISPATCHED = "DISPATCHED"
    CONFIRMED = "CONFIRMED"
    REJECTED = "REJECTED"
    NOT_FOUND = "NOT_FOUND"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


# The state rules, named once (the transition table in core/transitions/table.py is what moves between them).
# Never changes again, except through an operator-granted bypass (which starts a new generation).
TERMINAL: frozenset[State] = frozenset({State.CONFIRMED, State.REJECTED})
# The drive stopped with an outcome to report (audit line, span outcome): terminal, or UNKNOWN/NOT_FOUND.
REPORTED: frozenset[State] = TERMINAL | {State.UNKNOWN, State.NOT_FOUND}
# Nothing of the current attempt is at the provider (never sent, or absence proven): the next move is a send.
UNSENT: frozenset[State] = frozenset({State.PLANNED, State.NOT_FOUND})
# The attempt may have reached the provider and its outcome is not known: a read-back (or an operator) decides.
IN_DOUBT: frozenset[State] = frozenset({State.DISPATCHED, State.UNKNOWN})
# Due for the reconciler as soon as nobody holds its lease (approved and waiting, or its worker vanished).
RECOVERABLE: frozenset[State] = frozenset({State.PLANNED, State.DISPATCHED})
# Due for the reconciler once its re-check time (next_check_at) has come, and nobody holds its lease.
RECHECKED: frozenset[State] = frozenset({State.UNKNOWN})
# Every state the reconciler may claim (store.claim_due): RECOVERABLE, or RECHECKED when its time has come.
DUE: frozenset[State] = RECOVERABLE | RECHECKED


@dataclass(frozen=True)
class ActionIdentity:
    """Who asks for which logical action: carried unchanged from the wire to the record.

    The first five fields make the action id; the last three are recorded for tracing only."""

    tenant: str
    run_id: str
    step_id: str
    tool: str
    scope: str
    parent_run_id: str = ""
    agent: str = ""
    tool_call_id: str = ""

    @property
    def action_id(self) -> str:
        return keys.action_id(self.tenant, self.run_id, self.step_id, self.tool, self.scope)


class NextStep(enum.Enum):
    NONE = "NONE"
    RECHECK = "RECHECK"
    OPERATOR = "OPERATOR"
    DISPATCH = "DISPATCH"
    APPROVE = "APPROVE"


@dataclass(frozen=True)
class ActionRecord:
    """One logical side effect. Immutable: changes are made with `dataclasses.replace`."""

    action_id: str
    tenant: str
    run_id: str
    step_id: str
    tool: str
    scope: str
    payload_type: str
    payload: bytes
    fingerprint: str
    state: State
    created_at: float
    updated_at: float
    parent_run_id: str = ""
    agent: str = ""
    tool_call_id: str = ""
    attempts: int = 0
    # Provider-key generation: changes only on an operator-granted bypass.
    generation: int = 0
    # Lease: the holder may drive the action until lease_expires_at. `fence` grows at every
    # acquisition; every write is conditional on it, so a stale holder cannot write.
    fence: int = 0
    lease_owner: str = ""
    lease_expires_at: float = 0.0
    receipt: Receipt | None = None
    observation: Observation | None = None
    reason: str = ""
    next_step: NextStep = NextStep.NONE
    next_check_at: float | None = None
    dispatched_at: float | None = None
    # Verifications since the last dispatch (drives the re-check back-off).
    checks: int = 0
    bypass_granted: bool = False
    notes: tuple[str, ...] = ()
    # W3C traceparent of the Execute that created the action: later spans link to it.
    trace_parent: str = ""
    # When the last attempt ended without an answer: the latest moment the provider may have
    # committed, so the consistency window counts from here (None: unknown, e.g. a crash).
    attempt_ended_at: float | None = None
    # The tool's policy (a digest of its config) when the action was created or last re-approved:
    # an approval binds to it (docs/states.md, "Approvals").
    policy_version: str = ""
    # Distinct principals who approved the action, in order (a tool may need more than one).
    approvals: tuple[str, ...] = ()
    # The adapter instance ([adapters.NAME]) that dispatched the current attempt: only its
    # webhooks may settle the action, and the drift audit files the action under it ("": an
    # action stored before this was recorded; its tool's adapter stands in).
    adapter: str = ""

    @property
    def identity(self) -> ActionIdentity:
        return ActionIdentity(
            tenant=self.tenant,
            run_id=self.run_id,
            step_id=self.step_id,
            tool=self.tool,
            scope=self.scope,
            parent_run_id=self.parent_run_id,
            agent=self.agent,
            tool_call_id=self.tool_call_id,
        )

    @classmethod
    def of(cls, action_id: str, identity: ActionIdentity, **fields: Any) -> ActionRecord:
        """A record of `identity` (field names stay flat: stores map them to columns)."""
        return cls(
            action_id=action_id,
            tenant=identity.tenant,
            run_id=identity.run_id,
            step_id=identity.step_id,
            tool=identity.tool,
            scope=identity.scope,
            parent_run_id=identity.parent_run_id,
            agent=identity.agent,
            tool_call_id=identity.tool_call_id,
            **fields,
        )

    def leased_at(self, now: float) -> bool:
        return bool(self.lease_owner) and self.lease_expires_at > now

    def evolve(self, **changes: Any) -> ActionRecord:
        """A copy with `changes` (what `dataclasses.replace` gives: no field runs code at init,
        so copying the instance's dict is the same record at a fraction of the cost; this is on
        every step of the protocol)."""
        unknown = changes.keys() - _RECORD_FIELDS
        if unknown:
            raise TypeError(f"ActionRecord has no field(s) {sorted(unknown)}")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, **changes)
        return copy


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(ActionRecord))


@dataclass(frozen=True)
class ActionEvent:
    """One entry of an action's story (the `action_events` table): what happened, when, the
    state it left, who did it (operators' acts) and what was seen (answers, read-backs)."""

    action_id: str
    at: float
    kind: str
    state: State
    principal: str = ""
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    # Assigned by the store (the order of the story); 0 until stored.
    seq: int = 0


@dataclass(frozen=True)
class Change:
    """An action as a watcher sees it, with the cursor that resumes after it."""

    record: ActionRecord
    cursor: str


@dataclass(frozen=True)
class ListQuery:
    tenant: str
    state: State | None = None
    run_id: str = ""
    tool: str = ""
    page_size: int = 50
    # Opaque cursor from the previous page ("" for the first).
    after: str = ""


@dataclass(frozen=True)
class Page:
    records: list[ActionRecord] = field(default_factory=list)
    next_token: str = ""
