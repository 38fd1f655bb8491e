"""The pages people read: the inbox, the actions search, one action with its story."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import urlencode

import grpc
from babel import Locale
from starlette.requests import Request
from starlette.responses import Response

from effectgate.client import EffectGateClient, NotFound, State
from effectgate.client.errors import from_rpc_error
from effectgate.console import present
from effectgate.console.people import Person
from effectgate.console.web import parts, reader, render, signed_in
from effectgate.v1 import gateway_pb2 as pb

INBOX_STATES = (State.AWAITING_APPROVAL, State.UNKNOWN)
INBOX_LIMIT = 500  # per state: an inbox longer than that needs the search page
PAGE_SIZE = 50
RUN_LIMIT = 20  # the other actions of the same run shown on an action's page
READERS = 8  # GetAction calls at once (ListActions carries no payload: the money is in GetAction's answer)


async def detailed(client: EffectGateClient, actions: Iterable[pb.Action]) -> list[pb.Action]:
    """Each action as GetAction answers it to people (with its masked payload); one purged since
    it was listed keeps its listed record."""
    gate = asyncio.Semaphore(READERS)

    async def one(action: pb.Action) -> pb.Action:
        async with gate:
            try:
                return await client.get(action.action_id)
            except NotFound:
                return action

    return list(await asyncio.gather(*(one(a) for a in actions)))


async def inbox_rows(client: EffectGateClient, locale: Locale) -> list[present.Row]:
    """AWAITING_APPROVAL and UNKNOWN actions, oldest first, with what each asks for."""
    now = datetime.now(UTC)
    listed: list[pb.Action] = []
    for state in INBOX_STATES:
        count = 0
        async for action in client.list(state=state, page_size=200):
            listed.append(action)
            count += 1
            if count >= INBOX_LIMIT:
                break
    rows = [present.row(a, now, locale) for a in await detailed(client, listed)]
    return sorted(rows, key=lambda r: (r.created_at or now, r.action_id))


@signed_in
async def inbox(request: Request, person: Person, client: EffectGateClient) -> Response:
    return render(request, "inbox.html", person=person, rows=await inbox_rows(client, reader(request)))


@signed_in
async def inbox_fragment(request: Request, person: Person, client: EffectGateClient) -> Response:
    """The inbox's rows alone: htmx swaps them in when the live feed says something changed."""
    return render(request, "inbox_rows.html", person=person, rows=await inbox_rows(client, reader(request)))


def _moment(text: str) -> datetime | None:
    """An <input type="datetime-local"> value (read as UTC) or an RFC 3339 time."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


async def list_page(client: EffectGateClient, request: pb.ListActionsRequest) -> pb.ListActionsResponse:
    """One page of ListActions (oldest first), from the page token the last one gave."""
    request.page_size = PAGE_SIZE
    try:
        page: pb.ListActionsResponse = await client.stub.ListActions(request, metadata=client.metadata, timeout=15)
    except grpc.aio.AioRpcError as raw:
        raise from_rpc_error(raw) from None
    return page


@signed_in
async def actions(request: Request, person: Person, client: EffectGateClient) -> Response:
    query = request.query_params
    state_name = query.get("state", "").upper()
    state = State.value(state_name) if state_name in State.names() else State.UNSPECIFIED
    tool, run_id, token = query.get("tool", ""), query.get("run", ""), query.get("page", "")
    since, until = _moment(query.get("since", "")), _moment(query.get("until", ""))
    page = await list_page(client, pb.ListActionsRequest(state=state, tool=tool, run_id=run_id, page_token=token))
    now = datetime.now(UTC)
    rows = [present.row(a, now, reader(request)) for a in await detailed(client, page.actions)]
    rows = [
        r
        for r in rows
        if (since is None or (r.created_at and r.created_at >= since))
        and (until is None or (r.created_at and r.created_at <= until))
    ]
    filters = {k: query.get(k, "") for k in ("state", "tool", "run", "since", "until")}
    following = urlencode({**filters, "page": page.next_page_token}) if page.next_page_token else ""
    return render(
        request,
        "actions.html",
        person=person,
        rows=rows,
        filters=filters,
        states=State.names(),
        next_query=following,
    )


@signed_in
async def action(request: Request, person: Person, client: EffectGateClient) -> Response:
    action_id = request.path_params["action_id"]
    record = await client.get(action_id)
    story = await client.history(action_id)
    settings, now, locale = parts(request).settings, datetime.now(UTC), reader(request)
    shown = present.detail(record, now, settings.trace_url, settings.provider_url, locale)
    events = [present.event(e) for e in story.events]
    run = await same_run(client, record, now, locale)
    return render(request, "action.html", person=person, a=shown, events=events, run=run)


async def same_run(client: EffectGateClient, record: pb.Action, now: datetime, locale: Locale) -> list[present.Row]:
    """The other actions of the action's run (the first RUN_LIMIT), oldest first."""
    if not record.context.run_id:
        return []
    others: list[pb.Action] = []
    async for action in client.list(run_id=record.context.run_id, page_size=RUN_LIMIT + 1):
        if action.action_id != record.action_id:
            others.append(action)
        if len(others) >= RUN_LIMIT:
            break
    return [present.row(a, now, locale) for a in await detailed(client, others)]
