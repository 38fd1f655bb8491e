"""The one-action views: `show` and `describe` (every field of the action: ids, context, times,
receipt with its result, last observation with its evidence, notes), `verify` (what this
read-back found). `describe` adds what people are shown beyond the record (`DESCRIBE_EXTRAS`):
the decoded payload with its sensitive fields masked and what an approval binds to (GetAction
answers them to operators and observers), and the action's story as a timeline (GetActionHistory).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from effectgate.client.cli.render import Section, action_dict, age, amount, message_dict
from effectgate.client.client import EffectGateClient
from effectgate.client.errors import EffectGateError
from effectgate.client.money_text.asks import ask_of, typed
from effectgate.v1 import gateway_pb2 as pb


def when(stamp: str) -> str:
    return f"{stamp} ({age(stamp)} ago)" if stamp else ""


def action_sections(action: dict[str, Any]) -> list[Section]:
    context = action.get("context", {})
    ask = ask_of(action.get("payload") or {})  # people's tokens: GetAction shows them the payload
    asked = [("Amount", amount(action)), ("To", ask.party), ("For", ask.about)] if action.get("payload") else []
    sections = [
        Section(
            "",
            [
                ("Action", action["action_id"]),
                ("State", action["state"]),
                ("Next step", action["next_step"]),
                ("Reason", action["reason"]),
                ("Tenant", action["tenant"]),
                ("Tool", action["tool"]),
                ("Scope", action["scope"]),
                *asked,
                ("Run", context.get("run_id", "")),
                ("Step", context.get("step_id", "")),
                ("Parent run", context.get("parent_run_id", "")),
                ("Agent", context.get("agent", "")),
                ("Tool call", action["tool_call_id"]),
                ("Fingerprint", action["fingerprint"]),
                ("Provider key", action["provider_key"]),
                ("Generation", str(action["generation"])),
                ("Attempts", str(action["attempts"])),
                ("Created", when(action.get("created_at", ""))),
                ("Updated", when(action.get("updated_at", ""))),
                ("Next check", when(action.get("next_check_at", ""))),
            ],
        )
    ]
    receipt = action.get("receipt")
    if receipt:
        rows = [
            ("External id", receipt.get("external_id", "")),
            ("Request id", receipt.get("provider_request_id", "")),
            ("At", when(receipt.get("at", ""))),
        ]
        sections.append(Section("Receipt", rows, receipt.get("result"), "Result"))
    observation = action.get("observation")
    if observation:
        sections.append(observation_section("Last observation", observation))
    if action["notes"]:
        sections.append(Section("Notes", [(str(n), note) for n, note in enumerate(action["notes"], 1)]))
    return sections


def observation_section(title: str, observation: dict[str, Any]) -> Section:
    rows = [
        ("Outcome", observation.get("outcome", "")),
        ("At", when(observation.get("at", ""))),
        ("Detail", observation.get("detail", "")),
    ]
    return Section(title, rows, observation.get("evidence"), "Evidence")


def verify_sections(action: dict[str, Any], observation: dict[str, Any]) -> list[Section]:
    head = Section(
        "",
        [("Action", action["action_id"]), ("State", action["state"]), ("Next step", action["next_step"])],
    )
    return [head, observation_section("Read back now", observation)]


@dataclass(frozen=True)
class Extra:
    """One more part of `describe`: its key in JSON/YAML, its data, and how the text shows it."""

    key: str
    data: Any
    sections: list[Section]


async def payload_extra(client: EffectGateClient, action: pb.Action) -> Extra | None:
    """The decoded payload (sensitive fields masked) and what an approval names: on the action
    GetAction answers people; nothing for an agent's token (no payload)."""
    if not action.HasField("payload"):
        return None
    fields = action_dict(action)
    binding = [
        ("Fingerprint", fields["fingerprint"]),
        ("Policy version", fields["policy_version"]),
        ("Approved by", ", ".join(fields["approved_by"])),
        ("Approvals needed", str(fields["approvals_required"])),
        ("Dispatched", when(fields.get("dispatched_at", ""))),
        ("Settled", when(fields.get("settled_at", ""))),
    ]
    payload = fields["payload"]
    return Extra("payload", payload, [Section("Payload (sensitive fields masked)", binding, payload, "Fields")])


async def history_extra(client: EffectGateClient, action: pb.Action) -> Extra | None:
    """The action's story, oldest first, as a timeline (operators and observers; skipped when the
    token may not read it or the gateway does not serve it)."""
    try:
        answer = await client.history(action.action_id)
    except EffectGateError as exc:
        if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED):
            return None
        raise
    events = [typed(message_dict(e)) for e in answer.events]  # {"attempt": 0}, never 0.0
    for event in events:
        event["seq"] = int(event["seq"])
    rows = [(_moment(e), _told(e)) for e in events]
    return Extra("history", events, [Section("History", rows)])


def _moment(event: dict[str, Any]) -> str:
    return f"{event.get('at', '')} {event['kind']}"


def _told(event: dict[str, Any]) -> str:
    """`-> STATE, by NAME: NOTE; key=value ...` for one event."""
    text = f"-> {event['state']}"
    if event["principal"]:
        text += f", by {event['principal']}"
    if event["note"]:
        text += f": {event['note']}"
    detail = event.get("detail") or {}
    if detail:
        text += "; " + " ".join(f"{k}={_short(v)}" for k, v in detail.items())
    return text


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_short(v)}" for k, v in value.items()) + "}"
    return str(value)


# What `describe` asks the gateway for beyond the action, in order; each answers None when there
# is nothing to show.
DescribeExtra = Callable[[EffectGateClient, pb.Action], Awaitable[Extra | None]]
DESCRIBE_EXTRAS: list[DescribeExtra] = [payload_extra, history_extra]


async def describe(client: EffectGateClient, action_id: str) -> tuple[dict[str, Any], list[Section]]:
    """`describe ACTION`: the document for JSON/YAML and the sections for the text view."""
    action = await client.get(action_id)
    fields = action_dict(action)
    document: dict[str, Any] = {"action": fields}
    sections = action_sections(fields)
    for extra in DESCRIBE_EXTRAS:
        found = await extra(client, action)
        if found is not None:
            document[found.key] = found.data
            sections.extend(found.sections)
    return document, sections
