"""The action record and its states: the data the effect protocol and the stores share."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import Any

from effectgate.adapters.base import Observation, Outcome, Receipt


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
        return self in (State.CONFIRMED, State.REJECTED)


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

    def leased_at(self, now: float) -> bool:
        return bool(self.lease_owner) and self.lease_expires_at > now

    def evolve(self, **changes: Any) -> ActionRecord:
        return dataclasses.replace(self, **changes)

    # Serialisation: stores keep the whole record as one JSON document next to the columns
    # they index, so both backends share one encoding.
    def to_json(self) -> str:
        # A shallow field copy: dataclasses.asdict deep-copies every value and costs ~4x more.
        doc = {name: getattr(self, name) for name in _FIELD_NAMES}
        doc["payload"] = base64.b64encode(self.payload).decode()
        doc["state"] = self.state.value
        doc["next_step"] = self.next_step.value
        doc["notes"] = list(self.notes)
        doc["receipt"] = _receipt_doc(self.receipt)
        doc["observation"] = _observation_doc(self.observation)
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ActionRecord:
        doc = json.loads(text)
        doc["payload"] = base64.b64decode(doc["payload"])
        doc["state"] = State(doc["state"])
        doc["next_step"] = NextStep(doc["next_step"])
        doc["notes"] = tuple(doc["notes"])
        doc["receipt"] = Receipt(**doc["receipt"]) if doc["receipt"] else None
        obs = doc["observation"]
        if obs:
            obs["outcome"] = Outcome(obs["outcome"])
            obs["receipt"] = Receipt(**obs["receipt"]) if obs["receipt"] else None
            doc["observation"] = Observation(**obs)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ActionRecord))


def _receipt_doc(receipt: Receipt | None) -> dict[str, Any] | None:
    return dataclasses.asdict(receipt) if receipt else None


def _observation_doc(obs: Observation | None) -> dict[str, Any] | None:
    if obs is None:
        return None
    doc = dataclasses.asdict(obs)
    doc["outcome"] = obs.outcome.value
    doc["receipt"] = _receipt_doc(obs.receipt)
    return doc


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
