"""The one-action views: `show` and `describe` (every field of the action: ids, context, times,
receipt with its result, last observation with its evidence, notes), `verify` (what this
read-back found). `describe` adds the sections that come from other calls (`DESCRIBE_EXTRAS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from effectgate.client.cli.render import Section, action_dict, age
from effectgate.client.client import EffectGateClient
from effectgate.v1 import gateway_pb2 as pb


def when(stamp: str) -> str:
    return f"{stamp} ({age(stamp)} ago)" if stamp else ""


def action_sections(action: dict[str, Any]) -> list[Section]:
    context = action.get("context", {})
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


# What `describe` asks the gateway for beyond the action, in order; each answers None when there
# is nothing to show. The decoded payload (masked) and the action's history plug in here once the
# gateway serves them.
DescribeExtra = Callable[[EffectGateClient, pb.Action], Awaitable[Extra | None]]
DESCRIBE_EXTRAS: list[DescribeExtra] = []


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
