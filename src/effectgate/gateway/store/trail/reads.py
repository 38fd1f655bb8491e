"""The audit trail's reads, once for every SQL backend: one tenant's events in chain order
(ListEvents, `effectgate events`), and what `effectgate audit verify` walks (check.py).

Order: (n, seq) — the chain's position, then the row id for the rows written before the chain
began (all n = 0, first). A position is taken under the tenant's head lock and committed with it,
so a follower that pages by this cursor never skips a row that commits later behind it.
"""

from __future__ import annotations

import base64
from typing import Any

from effectgate.gateway.model import ChainEnds, EventPage, EventQuery, TrailEvent
from effectgate.gateway.store.sql_primitives import SqlHooks
from effectgate.gateway.store.trail.chain import TRAIL_SELECTED, trail_of
from effectgate.gateway.store.trail.stored import StoredRow, selected, stored_row, stored_values

_ENDS = (
    "SELECT h.tenant AS tenant, h.n AS n, h.hash AS hash, COALESCE(a.n, 0) AS anchor_n,"
    " COALESCE(a.hash, '') AS anchor_hash FROM event_heads h LEFT JOIN event_anchors a ON a.tenant = h.tenant"
)

MAX_PAGE = 1000


def encode_position(n: int, seq: int) -> str:
    return base64.urlsafe_b64encode(f"e{n}.{seq}".encode()).decode()


def decode_position(token: str) -> tuple[int, int]:
    """Raises ValueError on a token this store did not make."""
    try:
        text = base64.urlsafe_b64decode(token.encode("ascii")).decode("ascii")
    except (UnicodeError, ValueError) as exc:
        raise ValueError("not an event page token") from exc
    n, dot, seq = text[1:].partition(".")
    if not text.startswith("e") or not dot or not n.isdigit() or not seq.isdigit():
        raise ValueError("not an event page token")
    return int(n), int(seq)


def page_size(query: EventQuery) -> int:
    return 100 if query.page_size <= 0 else min(query.page_size, MAX_PAGE)


def events_sql(query: EventQuery, columns: str = TRAIL_SELECTED) -> tuple[str, list[Any]]:
    """The statement (with `?`) of one page of `query`, selecting `columns`."""
    where = ["tenant = ?"]
    params: list[Any] = [query.tenant]
    if query.after:
        n, seq = decode_position(query.after)
        # The first term bounds the (tenant, n, seq) index range; the second breaks ties by id.
        where.append("n >= ? AND (n > ? OR seq > ?)")
        params.extend([n, n, seq])
    if query.since:
        where.append("at >= ?")
        params.append(query.since)
    if query.until:
        where.append("at < ?")
        params.append(query.until)
    for column, value in (("principal", query.principal), ("kind", query.kind), ("tool", query.tool)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    params.append(page_size(query))
    sql = f"SELECT {columns} FROM action_events WHERE {' AND '.join(where)} ORDER BY n, seq LIMIT ?"
    return sql, params


class TrailStatements:
    """The verification's reads (parameters in each comment)."""

    def __init__(self, render: Any) -> None:
        # Every tenant with a chain: its head and its anchor.
        self.ends = render(
            "SELECT h.tenant, h.n, h.hash, COALESCE(a.n, 0), COALESCE(a.hash, '') FROM event_heads h"
            " LEFT JOIN event_anchors a ON a.tenant = h.tenant ORDER BY h.tenant"
        )
        # tenant, after n, limit: the chained rows in order.
        self.chain = render(
            f"SELECT {TRAIL_SELECTED} FROM action_events WHERE tenant = ? AND n > ? ORDER BY n, seq LIMIT ?"
        )
        # tenant, since: the first chained row at or after a time.
        self.first_since = render(
            f"SELECT {TRAIL_SELECTED} FROM action_events WHERE tenant = ? AND n > 0 AND at >= ? ORDER BY n, seq LIMIT 1"
        )
        # The rows written before the chain began.
        self.unchained = render("SELECT count(*) FROM action_events WHERE n = 0")
        # What `audit verify` reads: the same rows as stored (stored.py), never decoded by trust.
        self.postgres = render("?") != "?"
        rows = selected(self.postgres)
        ends = ("tenant", "n", "hash", "anchor_n", "anchor_hash")
        self.stored_ends = render(f"SELECT {selected(self.postgres, ends)} FROM ({_ENDS}) e ORDER BY 1, 2")
        self.stored_chain = render(
            f"SELECT {rows} FROM action_events WHERE tenant = ? AND n > ? ORDER BY n, seq LIMIT ?"
        )
        self.stored_first_since = render(
            f"SELECT {rows} FROM action_events WHERE tenant = ? AND n > 0 AND at >= ? ORDER BY n, seq LIMIT 1"
        )
        # prev_hash: the row that links to a hash, wherever it is (a full scan: only after a break).
        self.linked_to = render(f"SELECT {rows} FROM action_events WHERE prev_hash = ? ORDER BY seq LIMIT 1")


class SqlTrail(SqlHooks):
    """The trail's reads of the `Store` port on the SQL core's hooks (mixed into `SqlStore`)."""

    _trail: TrailStatements | None = None

    @property
    def _tq(self) -> TrailStatements:
        if self._trail is None:
            self._trail = TrailStatements(self._render)
        return self._trail

    async def events(self, query: EventQuery) -> EventPage:
        # Read as stored and decoded column by column: a row edited by hand is a refusal naming it
        # (EventRowBroken, DATA_LOSS), never a decode error that surfaces as INTERNAL.
        sql, params = events_sql(query, selected(self._tq.postgres))
        found = [stored_row(r, self._tq.postgres).checked() for r in await self._read(self._render(sql), params)]
        last = found[-1] if found else None
        token = encode_position(last.n, last.event.seq) if last else query.after
        return EventPage(found, token)

    async def chain_ends(self) -> list[ChainEnds]:
        found = await self._read(self._tq.ends, ())
        return [ChainEnds(str(t), int(n), str(h), int(an), str(ah)) for t, n, h, an, ah in found]

    async def chain_rows(self, tenant: str, after_n: int, limit: int) -> list[TrailEvent]:
        return [trail_of(r) for r in await self._read(self._tq.chain, (tenant, after_n, limit))]

    async def chain_first_since(self, tenant: str, since: float) -> TrailEvent | None:
        found = await self._read(self._tq.first_since, (tenant, since))
        return trail_of(found[0]) if found else None

    async def stored_chain_ends(self) -> list[tuple[tuple[str, ...], tuple[Any, ...]]]:
        found = await self._read(self._tq.stored_ends, ())
        return [stored_values(r, self._tq.postgres) for r in found]

    async def stored_chain_rows(self, tenant: str, after_n: int, limit: int) -> list[StoredRow]:
        found = await self._read(self._tq.stored_chain, (tenant, after_n, limit))
        return [stored_row(r, self._tq.postgres) for r in found]

    async def stored_first_since(self, tenant: str, since: float) -> StoredRow | None:
        found = await self._read(self._tq.stored_first_since, (tenant, since))
        return stored_row(found[0], self._tq.postgres) if found else None

    async def stored_linked_to(self, prev_hash: str) -> StoredRow | None:
        found = await self._read(self._tq.linked_to, (prev_hash,))
        return stored_row(found[0], self._tq.postgres) if found else None

    async def unchained_events(self) -> int:
        found = await self._read(self._tq.unchained, ())
        return int(found[0][0]) if found else 0
