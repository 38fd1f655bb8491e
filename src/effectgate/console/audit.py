"""The audit page: the operators' acts (approve, deny, reconcile, grant_bypass; any event with a
principal), read from the stories (GetActionHistory) of the newest `audit_scan` actions that carry
an operator's trace (notes, approvals, a denial). There is no audit log RPC: the stories are the
record, written in the same transaction as each act. Each act says what happened to the money
(the action's amount and its state now: went through, nothing moved, not proven)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

from babel import Locale
from starlette.requests import Request
from starlette.responses import Response

from effectgate.client import EffectGateClient, NotFound
from effectgate.console import present
from effectgate.console.people import Person
from effectgate.console.web import parts, reader, render, signed_in
from effectgate.v1 import gateway_pb2 as pb

READERS = 8  # stories read at once


@dataclass(frozen=True)
class Act:
    action_id: str
    tool: str
    run_id: str
    event: present.Event
    row: present.Row  # the action now: its amount and what happened to it


def touched(action: pb.Action) -> bool:
    """An operator acted on it (the record says so without reading its story)."""
    return bool(action.notes or action.approved_by or action.reason.startswith("denied by "))


async def acts(client: EffectGateClient, scan: int, tool: str, run_id: str, locale: Locale) -> list[Act]:
    newest: deque[pb.Action] = deque(maxlen=scan)  # ListActions answers oldest first
    async for action in client.list(tool=tool, run_id=run_id, page_size=500):
        newest.append(action)
    gate = asyncio.Semaphore(READERS)

    now = datetime.now(UTC)

    async def story(action: pb.Action) -> list[Act]:
        async with gate:
            events = (await client.history(action.action_id)).events
            with contextlib.suppress(NotFound):  # the amount is in GetAction's answer, not ListActions'
                action = await client.get(action.action_id)
        row = present.row(action, now, locale)
        return [
            Act(action.action_id, action.tool, action.context.run_id, present.event(e), row)
            for e in events
            if e.principal
        ]

    found = await asyncio.gather(*(story(a) for a in newest if touched(a)))
    return sorted((act for group in found for act in group), key=lambda act: act.event.seq, reverse=True)


@signed_in
async def audit(request: Request, person: Person, client: EffectGateClient) -> Response:
    query = request.query_params
    filters = {k: query.get(k, "").strip() for k in ("principal", "kind", "tool", "run")}
    scan = parts(request).settings.audit_scan
    found = await acts(client, scan, filters["tool"], filters["run"], reader(request))
    found = [
        act
        for act in found
        if (not filters["principal"] or act.event.principal == filters["principal"])
        and (not filters["kind"] or act.event.kind == filters["kind"])
    ]
    kinds = ["approve", "deny", "reconcile", "grant_bypass"]
    return render(request, "audit.html", person=person, acts=found, filters=filters, kinds=kinds, scan=scan)
