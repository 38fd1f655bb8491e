"""Actions and events as the templates show them: plain values, money in the reader's locale,
times in UTC, ages, and the configured links. Nothing here marks text safe: the templates escape
every string."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from babel import Locale
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from effectgate.client import NextStep, State
from effectgate.client.money_text.asks import ask_of, typed, typed_payload
from effectgate.console import words
from effectgate.v1 import gateway_pb2 as pb

NEXT_STEPS = {getattr(NextStep, n): n for n in ("NONE", "RECHECK", "OPERATOR", "DISPATCH", "APPROVE")}


def when(stamp: Timestamp, has: bool = True) -> datetime | None:
    return stamp.ToDatetime(tzinfo=UTC) if has and (stamp.seconds or stamp.nanos) else None


def stamp(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


def age(moment: datetime | None, now: datetime) -> str:
    """ "42s", "7m", "3h 5m", "2d 4h"."""
    if moment is None:
        return ""
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes}m"
    if days == 0:
        return f"{hours}h {minutes % 60}m"
    return f"{days}d {hours % 24}h"


def struct(message: Any) -> dict[str, Any]:
    """A Struct as JSON-like data, its integers as integers (a Struct carries every number as a double)."""
    data: dict[str, Any] = typed(MessageToDict(message)) if message is not None else {}
    return data


def fill(template: str, values: dict[str, str]) -> str:
    """A link from a configured template; each value is URL-quoted, so agent text stays data."""
    if not template:
        return ""
    quoted = {k: quote(v, safe="") for k, v in values.items()}
    try:
        return template.format(**quoted)
    except (KeyError, IndexError, ValueError):
        return ""


@dataclass(frozen=True)
class Row:
    """One action in a table."""

    action_id: str
    state: str
    tool: str
    scope: str
    run_id: str
    step_id: str
    agent: str
    created: str
    updated: str
    age: str
    reason: str
    next_step: str
    created_at: datetime | None
    # What it asks for, from the payload (GetAction's answer; empty from ListActions alone).
    amount: str = ""
    party: str = ""
    about: str = ""
    asks: str = ""  # "billing-agent asks to charge €125.00 to cus_1: Deposit"
    approve_does: str = ""  # what Approve (or the next decision) will do
    outcome: str = ""  # what happened to the money (or the message), as of now


def row(action: pb.Action, now: datetime, locale: Locale | str | None = None) -> Row:
    created = when(action.created_at, action.HasField("created_at"))
    ask = ask_of(struct(action.payload)) if action.HasField("payload") else ask_of({})
    amount = ask.money.text(locale) if ask.money is not None else ""
    return Row(
        action_id=action.action_id,
        state=State.name(action.state),
        tool=action.tool,
        scope=action.scope,
        run_id=action.context.run_id,
        step_id=action.context.step_id,
        agent=action.context.agent,
        created=stamp(created),
        updated=stamp(when(action.updated_at, action.HasField("updated_at"))),
        age=age(created, now),
        reason=action.reason,
        next_step=NEXT_STEPS.get(action.next_step, ""),
        created_at=created,
        amount=amount,
        party=ask.party,
        about=ask.about,
        asks=words.asks(action.context.agent, action.tool, amount, ask.party, ask.about),
        approve_does=words.approve_does(action, amount, ask.party),
        outcome=words.outcome(action, amount),
    )


@dataclass(frozen=True)
class Event:
    seq: int
    kind: str
    state: str
    at: str
    principal: str
    note: str
    detail: dict[str, Any]


def event(item: pb.ActionEvent) -> Event:
    return Event(
        seq=item.seq,
        kind=item.kind,
        state=State.name(item.state),
        at=stamp(when(item.at, item.HasField("at"))),
        principal=item.principal,
        note=item.note,
        detail=struct(item.detail) if item.HasField("detail") else {},
    )


def detail(
    action: pb.Action, now: datetime, trace_url: str, provider_url: str, locale: Locale | str | None = None
) -> dict[str, Any]:
    """Everything the action page shows of one action."""
    external_id = action.receipt.external_id if action.HasField("receipt") else ""
    values = {
        "action_id": action.action_id,
        "run_id": action.context.run_id,
        "tool": action.tool,
        "external_id": external_id,
    }
    receipt = action.receipt if action.HasField("receipt") else None
    observation = action.observation if action.HasField("observation") else None
    return {
        "row": row(action, now, locale),
        "payload": typed_payload(struct(action.payload)) if action.HasField("payload") else {},
        "tool_call_id": action.tool_call_id,
        "parent_run_id": action.context.parent_run_id,
        "fingerprint": action.fingerprint,
        "policy_version": action.policy_version,
        "provider_key": action.provider_key,
        "attempts": action.attempts,
        "generation": action.generation,
        "approved_by": list(action.approved_by),
        "approvals_required": action.approvals_required,
        "notes": list(action.notes),
        "settled": stamp(when(action.settled_at, action.HasField("settled_at"))),
        "next_check": stamp(when(action.next_check_at, action.HasField("next_check_at"))),
        "receipt": None
        if receipt is None
        else {
            "external_id": receipt.external_id,
            "provider_request_id": receipt.provider_request_id,
            "at": stamp(when(receipt.at, receipt.HasField("at"))),
            "result": struct(receipt.result) if receipt.HasField("result") else {},
        },
        "observation": None
        if observation is None
        else {
            "outcome": pb.ObservationOutcome.Name(observation.outcome).removeprefix("OBSERVATION_OUTCOME_"),
            "at": stamp(when(observation.at, observation.HasField("at"))),
            "detail": observation.detail,
            "evidence": struct(observation.evidence) if observation.HasField("evidence") else {},
        },
        "trace_link": fill(trace_url, values),
        "provider_link": fill(provider_url, values) if external_id else "",
        "awaiting": action.state == State.AWAITING_APPROVAL,
        "unknown": action.state == State.UNKNOWN,
        "settled_once": action.state == State.CONFIRMED,
    }
