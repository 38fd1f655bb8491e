"""What a notification says: which kind an action event is (if any), and the notification made of
it or of a notice, in words and figures a person reads.

A notification names the action, its tool, tenant and state, the money as money (the client's
formatter, Babel: `4200 eur` is "€42.00"), to whom and what for, the reason, who decided, and a
link to the action's console page. It never carries a payload field the tool masks: the payload
is read as operators see it (`masked_payload`), the masked fields are dropped, and only the
amount, the party and the description are taken from what is left.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from effectgate.client.money_text.asks import ask_of, typed_payload
from effectgate.gateway.core import MASK, EffectProtocol, masked_payload
from effectgate.gateway.model import ActionEvent, ActionRecord, Notice, State, TrailEvent
from effectgate.gateway.model import notify as kinds

_TITLES = {
    kinds.APPROVAL_WAITING: "waits for approval",
    kinds.APPROVAL_DECIDED: "approval decided",
    kinds.APPROVAL_EXPIRED: "approval expired",
    kinds.UNKNOWN_PARKED: "outcome unknown (parked)",
    kinds.LIMIT_DENIED: "refused by a limit",
    kinds.BREAKER_OPENED: "circuit breaker opened",
    kinds.WEBHOOK_FORGERIES: "webhook forgeries",
}


def kind_of(event: ActionEvent) -> str:
    """The notification kind of an action event, or "" (most events are none). An `observed`
    that leaves the action UNKNOWN may be a re-check of one parked already: `parked_again` tells."""
    if event.kind in ("claim", "reapprove") and event.state is State.AWAITING_APPROVAL:
        return kinds.APPROVAL_WAITING
    if event.kind in ("approve", "deny"):
        return kinds.APPROVAL_DECIDED
    if event.kind == "expire":
        return kinds.APPROVAL_EXPIRED
    if event.state is State.UNKNOWN and event.kind in ("park", "observed"):
        return kinds.UNKNOWN_PARKED
    return ""


def parked_again(event: ActionEvent, story: list[ActionEvent]) -> bool:
    """Whether the event before `event` in the action's story left it UNKNOWN already."""
    before = [e for e in story if e.seq < event.seq]
    return bool(before) and before[-1].state is State.UNKNOWN


def event_id(trail: TrailEvent) -> str:
    """The receiver's dedup key of an action event: its chain hash, unique and the same on every
    read (a crash that stages it again makes the same id)."""
    return "evt_" + trail.hash[:40]


def notice_id(notice: Notice) -> str:
    return "ntc_" + hashlib.sha256(f"{notice.kind}\x00{notice.key}".encode()).hexdigest()[:40]


def _iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _asks(protocol: EffectProtocol, record: ActionRecord | None) -> dict[str, Any]:
    if record is None:
        return {}
    shown = {k: v for k, v in masked_payload(protocol, record).items() if v != MASK}
    ask = ask_of(typed_payload(shown))
    out: dict[str, Any] = {}
    if ask.money is not None:
        out["money"] = {"amount_minor": ask.money.minor, "currency": ask.money.currency, "text": ask.money.text()}
    if ask.party:
        out["party"] = ask.party
    if ask.about:
        out["about"] = ask.about
    return out


def of_event(protocol: EffectProtocol, trail: TrailEvent, kind: str, record: ActionRecord | None) -> dict[str, Any]:
    """The notification of an action event (Standard Webhooks' `type`, `timestamp`, `data`)."""
    e = trail.event
    data: dict[str, Any] = {
        "event_id": event_id(trail),
        "tenant": trail.tenant,
        "tool": trail.tool,
        "action_id": e.action_id,
        "event": e.kind,
        "state": e.state.value,
        "path": f"/actions/{quote(e.action_id, safe='')}",
    }
    reason = e.detail.get("reason") or (record.reason if record is not None else "")
    for key, value in (("reason", reason), ("principal", e.principal), ("note", e.note)):
        if value:
            data[key] = value
    if e.kind == "approve":
        data["decision"] = "approved" if e.state is not State.AWAITING_APPROVAL else "approved, more approvals needed"
    elif e.kind == "deny":
        data["decision"] = "denied"
    data.update(_asks(protocol, record))
    return {"type": kind, "timestamp": _iso(e.at), "data": data}


def of_notice(protocol: EffectProtocol, notice: Notice, record: ActionRecord | None) -> dict[str, Any]:
    data: dict[str, Any] = {"event_id": notice_id(notice), "tenant": notice.tenant, "tool": notice.tool}
    if notice.action_id:
        data["action_id"] = notice.action_id
        data["path"] = f"/actions/{quote(notice.action_id, safe='')}"
    else:
        data["path"] = "/inbox"
    data.update(notice.detail)
    data.update(_asks(protocol, record))
    return {"type": notice.kind, "timestamp": _iso(notice.at), "data": data}


def for_sink(note: Mapping[str, Any], console_url: str) -> dict[str, Any]:
    """The notification with its console link for a sink."""
    data = dict(note["data"])
    data["link"] = console_url + str(data.pop("path", "/"))
    return {**note, "data": data}


def summary(note: Mapping[str, Any]) -> str:
    """One line: what happened, to what, for how much ("charge_card: waits for approval: €42.00
    to cus_7 (Deposit)")."""
    data = note["data"]
    title = _TITLES.get(str(note["type"]), str(note["type"]))
    words = f"{data.get('tool') or 'effectgate'}: {title}"
    if data.get("decision"):
        words += f" ({data['decision']})"
    money = data.get("money", {}).get("text", "")
    if money or data.get("party"):
        words += ": " + " to ".join(str(p) for p in (money, data.get("party")) if p)
    if data.get("about"):
        words += f" ({data['about']})"
    return words


def lines(note: Mapping[str, Any]) -> list[str]:
    """The notification as lines of text (the email's body, Slack's context)."""
    data = note["data"]
    out = [summary(note)]
    for label, key in (
        ("Action", "action_id"),
        ("Tenant", "tenant"),
        ("State", "state"),
        ("Reason", "reason"),
        ("Message", "message"),
        ("Why", "why"),
        ("By", "principal"),
        ("Note", "note"),
        ("Adapter", "adapter"),
        ("Refused", "refused"),
    ):
        if data.get(key):
            out.append(f"{label}: {data[key]}")
    out.append(f"When: {note['timestamp']}")
    out.append(f"Open: {data.get('link', '')}")
    out.append(f"Event id: {data['event_id']}")
    return out
