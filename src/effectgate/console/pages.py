"""The pages people read: the inbox, the actions search, one action with its story."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

import grpc
from starlette.requests import Request
from starlette.responses import Response

from effectgate.client import EffectGateClient, State
from effectgate.client.errors import from_rpc_error
from effectgate.console import present
from effectgate.console.people import Person
from effectgate.console.web import parts, render, signed_in
from effectgate.v1 import gateway_pb2 as pb

INBOX_STATES = (State.AWAITING_APPROVAL, State.UNKNOWN)
INBOX_LIMIT = 500  # per state: an inbox longer than that needs the search page
PAGE_SIZE = 50


async def inbox_rows(client: EffectGateClient) -> list[present.Row]:
    """AWAITING_APPROVAL and UNKNOWN actions, oldest first."""
    now = datetime.now(UTC)
    rows: list[present.Row] = []
    for state in INBOX_STATES:
        count = 0
        async for action in client.list(state=state, page_size=200):
            rows.append(present.row(action, now))
            count += 1
            if count >= INBOX_LIMIT:
                break
    return sorted(rows, key=lambda r: (r.created_at or now, r.action_id))


@signed_in
async def inbox(request: Request, person: Person, client: EffectGateClient) -> Response:
    return render(request, "inbox.html", person=person, rows=await inbox_rows(client))


@signed_in
async def inbox_fragment(request: Request, person: Person, client: EffectGateClient) -> Response:
    """The inbox's rows alone: htmx swaps them in when the live feed says something changed."""
    return render(request, "inbox_rows.html", person=person, rows=await inbox_rows(client))


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
    rows = [present.row(a, now) for a in page.actions]
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
    settings = parts(request).settings
    shown = present.detail(record, datetime.now(UTC), settings.trace_url, settings.provider_url)
    events = [present.event(e) for e in story.events]
    return render(request, "action.html", person=person, a=shown, events=events)
