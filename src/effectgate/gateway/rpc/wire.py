"""Conversions between domain records and effectgate.v1 messages. No logic lives here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from effectgate.adapters.base import Observation, Outcome, Receipt
from effectgate.gateway.model import (
    ActionEvent,
    ActionRecord,
    InvalidRequest,
    LimitGrant,
    NextStep,
    State,
    ToolUsage,
    TrailEvent,
    provider_key,
)
from effectgate.v1 import gateway_pb2 as pb

STATE_TO_PB = {
    State.PLANNED: pb.EFFECT_STATE_PLANNED,
    State.DISPATCHED: pb.EFFECT_STATE_DISPATCHED,
    State.CONFIRMED: pb.EFFECT_STATE_CONFIRMED,
    State.REJECTED: pb.EFFECT_STATE_REJECTED,
    State.NOT_FOUND: pb.EFFECT_STATE_NOT_FOUND,
    State.UNKNOWN: pb.EFFECT_STATE_UNKNOWN,
    State.AWAITING_APPROVAL: pb.EFFECT_STATE_AWAITING_APPROVAL,
}
PB_TO_STATE = {v: k for k, v in STATE_TO_PB.items()}
OUTCOME_TO_PB = {
    Outcome.CONFIRMED: pb.OBSERVATION_OUTCOME_CONFIRMED,
    Outcome.NOT_FOUND: pb.OBSERVATION_OUTCOME_NOT_FOUND,
    Outcome.UNKNOWN: pb.OBSERVATION_OUTCOME_UNKNOWN,
}
NEXT_STEP_TO_PB = {
    NextStep.NONE: pb.NEXT_STEP_NONE,
    NextStep.RECHECK: pb.NEXT_STEP_RECHECK,
    NextStep.OPERATOR: pb.NEXT_STEP_OPERATOR,
    NextStep.DISPATCH: pb.NEXT_STEP_DISPATCH,
    NextStep.APPROVE: pb.NEXT_STEP_APPROVE,
}


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def struct(values: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({k: _jsonable(v) for k, v in values.items()})
    return out


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def receipt_pb(receipt: Receipt) -> pb.Receipt:
    return pb.Receipt(
        external_id=receipt.external_id,
        provider_request_id=receipt.provider_request_id,
        result=struct(receipt.result),
        at=timestamp(receipt.at),
    )


def observation_pb(obs: Observation) -> pb.Observation:
    return pb.Observation(
        outcome=OUTCOME_TO_PB[obs.outcome],
        evidence=struct(obs.evidence),
        at=timestamp(obs.at),
        detail=obs.detail,
    )


def action_pb(record: ActionRecord) -> pb.Action:
    action = pb.Action(
        action_id=record.action_id,
        tenant=record.tenant,
        context=pb.RunContext(
            run_id=record.run_id,
            step_id=record.step_id,
            parent_run_id=record.parent_run_id,
            agent=record.agent,
        ),
        tool=record.tool,
        scope=record.scope,
        fingerprint=record.fingerprint,
        state=STATE_TO_PB[record.state],
        attempts=record.attempts,
        reason=record.reason,
        created_at=timestamp(record.created_at),
        updated_at=timestamp(record.updated_at),
        tool_call_id=record.tool_call_id,
        generation=record.generation,
        next_step=NEXT_STEP_TO_PB[record.next_step],
        provider_key=provider_key(record.action_id, record.generation),
        notes=list(record.notes),
    )
    if record.receipt is not None:
        action.receipt.CopyFrom(receipt_pb(record.receipt))
    if record.observation is not None:
        action.observation.CopyFrom(observation_pb(record.observation))
    if record.next_check_at is not None:
        action.next_check_at.CopyFrom(timestamp(record.next_check_at))
    return action


def person_action_pb(record: ActionRecord, approvals_required: int) -> pb.Action:
    """The action as every answer to a person shows it (Approve, Deny, Reconcile, GrantBypass,
    ListActions, WatchActions, GetAction): `action_pb` plus when it was sent and its approvals,
    how many its tool asks (`approvals_required`), who gave them, under which policy version."""
    action = action_pb(record)
    if record.dispatched_at is not None:
        action.dispatched_at.CopyFrom(timestamp(record.dispatched_at))
    action.policy_version = record.policy_version
    action.approved_by.extend(record.approvals)
    action.approvals_required = approvals_required
    return action


def detailed_action_pb(
    record: ActionRecord, payload: dict[str, Any], approvals_required: int, settled_at: float | None
) -> pb.Action:
    """One action as people see it (GetAction): `person_action_pb` plus the masked payload and
    when it settled (`settled_at`, from its story)."""
    action = person_action_pb(record, approvals_required)
    action.payload.CopyFrom(struct(payload))
    if settled_at is not None:
        action.settled_at.CopyFrom(timestamp(settled_at))
    return action


def event_pb(event: ActionEvent) -> pb.ActionEvent:
    return pb.ActionEvent(
        seq=event.seq,
        kind=event.kind,
        state=STATE_TO_PB[event.state],
        at=timestamp(event.at),
        principal=event.principal,
        note=event.note,
        detail=struct(event.detail),
    )


def trail_event_pb(row: TrailEvent) -> pb.TrailEvent:
    """An event of the audit trail with its chain link and the detail's stored text."""
    return pb.TrailEvent(
        event=event_pb(row.event),
        action_id=row.event.action_id,
        tenant=row.tenant,
        tool=row.tool,
        position=row.n,
        prev_hash=row.prev_hash,
        hash=row.hash,
        detail_json=row.detail_json,
        at_seconds=row.event.at,
    )


def tool_limits_pb(usage: ToolUsage) -> pb.ToolLimits:
    return pb.ToolLimits(
        tool=usage.tool,
        window_start=timestamp(usage.window_start),
        window_end=timestamp(usage.window_end),
        limits=[
            pb.LimitUse(limit=u.limit, currency=u.currency, cap=u.cap, used=u.used, left=u.left, run_id=u.run_id)
            for u in usage.limits
        ],
    )


def grant_pb(grant: LimitGrant) -> pb.GrantLimitResponse:
    return pb.GrantLimitResponse(
        action_id=grant.action_id,
        principal=grant.principal,
        note=grant.note,
        granted_at=timestamp(grant.granted_at),
        expires_at=timestamp(grant.expires_at),
    )


def execute_answer(record: ActionRecord, replayed: bool) -> bytes:
    """The serialised `ExecuteResponse` (the Execute handler answers bytes: see agent_service)."""
    return pb.ExecuteResponse(action=action_pb(record), replayed=replayed).SerializeToString()


def execute_answers(record: ActionRecord) -> tuple[bytes, bytes]:
    """A new action's answer and the one its replays get (`replay_answer`'s bytes), from one
    `Action`: the second costs the encoder only, not building the `Action` again."""
    response = pb.ExecuteResponse(action=action_pb(record))
    answer = response.SerializeToString()
    response.replayed = True
    return answer, response.SerializeToString()


def replay_answer(record: ActionRecord) -> bytes:
    """The answer to a replay of a settled action: what the protocol's replay cache keeps with
    the record, made once per kept record (`EffectProtocol.answer_replays_with`). Copying an
    `Action` into a response and serialising it is most of a replay's own CPU."""
    return execute_answer(record, True)


# -- size limits on what callers send ----------------------------------------------------------------
#
# Size limits on what callers send, so one oversized id cannot make an action (or a whole
# ListActions page) unreadable, and an error never echoes a long value back.

# Clients (grpc's default) accept 4 MiB: a page stays well under it whatever the server allows.
CLIENT_RECEIVE_LIMIT = 4 << 20


@dataclass(frozen=True)
class Limits:
    """From [gateway] max_id_bytes / max_note_bytes (their defaults live in the config schema)."""

    # run_id, step_id, scope, agent, parent_run_id, tool_call_id, tool, action ids.
    max_id_bytes: int
    # One operator note (Approve, Reconcile, GrantBypass).
    max_note_bytes: int
    # Bytes of the records of one ListActions page.
    max_page_bytes: int

    @classmethod
    def for_server(cls, max_id_bytes: int, max_note_bytes: int, max_send_bytes: int) -> Limits:
        return cls(max_id_bytes, max_note_bytes, min(max_send_bytes, CLIENT_RECEIVE_LIMIT) // 2)

    def check_ids(self, fields: Iterable[tuple[str, str]]) -> None:
        _check(fields, self.max_id_bytes)

    def check_note(self, name: str, note: str) -> None:
        _check([(name, note)], self.max_note_bytes)

    def check_page_token(self, token: str) -> None:
        # A token encodes an action id and a time (base64): a few times an id at most.
        _check([("page_token", token)], 4 * self.max_id_bytes)


def _check(fields: Iterable[tuple[str, str]], limit: int) -> None:
    # The message says how long the value is, never what it holds.
    violations = [
        (name, f"is {size} bytes; at most {limit} allowed")
        for name, value in fields
        if (size := len(value.encode())) > limit
    ]
    if violations:
        raise InvalidRequest(violations)


def fit_page(messages: Sequence[Message], budget: int) -> int:
    """How many of `messages` (at least one) fit in `budget` bytes on the wire."""
    used = 0
    for count, message in enumerate(messages):
        used += message.ByteSize() + 8  # field tag and length prefix
        if used > budget and count > 0:
            return count
    return len(messages)
