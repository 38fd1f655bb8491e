"""The audit trail's hash chain (issue 34, docs/security.md), once for every SQL backend.

Every event row of a tenant takes the next position `n` of that tenant's chain and carries
`prev_hash` (the hash at n - 1, "" at n = 1, or the retention anchor's) and
`hash = sha256_hex(prev_hash + canonical(row))`, where `canonical` is the row's fields as compact
JSON with sorted keys (ASCII only, the detail as its stored text, `at` as Python writes a float).

The row and the head (`event_heads`) advance in the event's own transaction, and the head row
serialises them: PostgreSQL advances it with one upsert (`ON CONFLICT DO UPDATE` takes the head's
row lock until the commit, so replicas writing at once queue there and cannot fork the chain),
computing the hash itself with `sha256()`, in the same statement as the event (no extra round
trip); SQLite's single writer already serialises, so it reads the head, hashes here, writes the
row and the head — one indexed read and one write more, in the same group commit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from effectgate.gateway.model import ActionEvent, TrailEvent
from effectgate.gateway.store.action_events import EVENT_COLUMNS, event_of, event_values
from effectgate.gateway.store.sql_primitives import Script

CHAINED_COLUMNS = f"{EVENT_COLUMNS}, tenant, tool, n, prev_hash, hash"
TRAIL_SELECTED = f"seq, {CHAINED_COLUMNS}"
_canon = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode
_PG_HASH = "encode(sha256(convert_to({}, 'UTF8')), 'hex')"


def canonical(values: Sequence[Any], tenant: str, tool: str) -> str:
    """The canonical encoding of an event row (`values` in `EVENT_COLUMNS` order)."""
    action_id, at, kind, state, principal, note, detail = values
    return _canon(
        {
            "action_id": action_id,
            "at": float(at),
            "detail": detail,
            "kind": kind,
            "note": note,
            "principal": principal,
            "state": state,
            "tenant": tenant,
            "tool": tool,
        }
    )


def link(prev_hash: str, canon: str) -> str:
    """The hash of a row whose canonical encoding is `canon`, after a row hashed `prev_hash`."""
    return hashlib.sha256((prev_hash + canon).encode("ascii")).hexdigest()


def row_hash(row: TrailEvent) -> str:
    """What a stored row's hash must be, recomputed from its fields and its `prev_hash`."""
    e = row.event
    values = (e.action_id, e.at, e.kind, e.state.value, e.principal, e.note, row.detail_json)
    return link(row.prev_hash, canonical(values, row.tenant, row.tool))


def trail_of(row: Sequence[Any]) -> TrailEvent:
    """The event of a row selected as `TRAIL_SELECTED`."""
    # TRAIL_SELECTED starts as `seq, EVENT_COLUMNS` does: the story's own reader takes that part.
    return TrailEvent(
        event_of(row), row[8], row[9], n=int(row[10]), prev_hash=row[11], hash=row[12], detail_json=row[7]
    )


def _pg_head(source: str) -> str:
    """PostgreSQL: advances the tenant's head (parameters: tenant, canon, canon) for each row of
    `source` ("" for one row), answering the new position, the previous hash and the new hash."""
    first = _PG_HASH.format("?::text")
    after = _PG_HASH.format("event_heads.hash || ?::text")
    select = f"SELECT ?::text, 1, '', {first}" + (f" FROM {source}" if source else "")
    return (
        f"INSERT INTO event_heads (tenant, n, prev_hash, hash) {select}"
        " ON CONFLICT (tenant) DO UPDATE SET n = event_heads.n + 1, prev_hash = event_heads.hash,"
        f" hash = {after} RETURNING n, prev_hash, hash"
    )


# The event's columns cast for PostgreSQL (parameters: the event's columns after action_id,
# then tenant, tool).
_PG_EVENT = "?::double precision, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text, ?::text"


class ChainStatements:
    """The chain's statements, written with `?`, rendered by the caller's dialect."""

    def __init__(self, numbered: bool, render: Any) -> None:
        self.postgres = numbered
        # PostgreSQL: the event and the head in one statement (parameters: tenant, canon, canon,
        # action_id, the event's other columns, tenant, tool).
        self.append = render(
            f"WITH head AS ({_pg_head('')}) INSERT INTO action_events ({CHAINED_COLUMNS})"
            f" SELECT ?::text, {_PG_EVENT}, head.n, head.prev_hash, head.hash FROM head"
        )
        # SQLite: the head, read and written around the row by the single writer.
        self.head = render("SELECT n, hash FROM event_heads WHERE tenant = ?")
        self.insert = render(
            f"INSERT INTO action_events ({CHAINED_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        self.advance = render(
            "INSERT INTO event_heads (tenant, n, prev_hash, hash) VALUES (?, ?, ?, ?) ON CONFLICT (tenant)"
            " DO UPDATE SET n = excluded.n, prev_hash = excluded.prev_hash, hash = excluded.hash"
        )


def logged_event(source: str) -> str:
    """PostgreSQL: the CTE parts that write the event of the change `source` (a CTE answering
    `action_id`) and advance the head, only when `source` wrote (parameters: tenant, canon,
    canon, the event's columns after action_id, tenant, tool)."""
    return (
        f"head AS ({_pg_head(source)}), logged AS (INSERT INTO action_events ({CHAINED_COLUMNS})"
        f" SELECT {source}.action_id, {_PG_EVENT}, head.n, head.prev_hash, head.hash FROM {source}, head)"
    )


def logged_params(event: ActionEvent, tenant: str, tool: str) -> tuple[Any, ...]:
    """The parameters of `logged_event`."""
    values = event_values(event)
    canon = canonical(values, tenant, tool)
    return (tenant, canon, canon, *values[1:], tenant, tool)


def append(q: ChainStatements, event: ActionEvent, tenant: str, tool: str) -> Script:
    """Writes `event` as the next row of `tenant`'s chain, in the caller's transaction."""
    values = event_values(event)
    canon = canonical(values, tenant, tool)
    if q.postgres:
        yield q.append, (tenant, canon, canon, *values, tenant, tool)
        return
    found = yield q.head, (tenant,)
    n, prev = (int(found[0][0]), str(found[0][1])) if found else (0, "")
    digest = link(prev, canon)
    yield q.insert, (*values, tenant, tool, n + 1, prev, digest)
    yield q.advance, (tenant, n + 1, prev, digest)


def logged_insert(insert: str) -> str:
    """PostgreSQL: `insert ... RETURNING action_id` with its chained event, returning the
    inserted id (or nothing). Parameters: the insert's, then `logged_params`."""
    return f"WITH changed AS ({insert}), {logged_event('changed')} SELECT action_id FROM changed"


def logged_update(update: str) -> str:
    """PostgreSQL: `update` with its chained event, returning the number of rows changed."""
    return f"WITH changed AS ({update} RETURNING action_id), {logged_event('changed')} SELECT count(*) FROM changed"


class PruneStatements:
    """Retention's prune of a tenant's chain prefix (parameters in each comment)."""

    def __init__(self, render: Any) -> None:
        # tenant: the first position whose action is still stored.
        self.first_kept = render(
            "SELECT e.n FROM action_events e WHERE e.tenant = ? AND e.n > 0"
            " AND EXISTS (SELECT 1 FROM actions a WHERE a.action_id = e.action_id) ORDER BY e.n LIMIT 1"
        )
        # tenant.
        self.head_n = render("SELECT n FROM event_heads WHERE tenant = ?")
        # tenant, n.
        self.hash_at = render("SELECT hash FROM action_events WHERE tenant = ? AND n = ?")
        # tenant, n.
        self.delete = render("DELETE FROM action_events WHERE tenant = ? AND n > 0 AND n <= ? RETURNING n")
        # tenant, n, hash: the anchor only moves forward.
        self.anchor = render(
            "INSERT INTO event_anchors (tenant, n, hash) VALUES (?, ?, ?) ON CONFLICT (tenant)"
            " DO UPDATE SET n = excluded.n, hash = excluded.hash WHERE excluded.n > event_anchors.n"
        )


def prune(q: PruneStatements, tenant: str) -> Script:
    """Deletes the prefix of `tenant`'s chain whose actions are all gone and moves the anchor to
    its last row (the hash the first remaining row links to), in one transaction; the number of
    rows deleted. Events of a purged action behind a kept one wait for a later pass."""
    found = yield q.first_kept, (tenant,)
    if found:
        cutoff = int(found[0][0]) - 1
    else:
        head = yield q.head_n, (tenant,)
        cutoff = int(head[0][0]) if head else 0
    if cutoff <= 0:
        return 0
    last = yield q.hash_at, (tenant, cutoff)
    if not last:  # pruned already
        return 0
    yield q.anchor, (tenant, cutoff, str(last[0][0]))
    deleted = yield q.delete, (tenant, cutoff)
    return len(deleted)
