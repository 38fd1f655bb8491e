"""The SQL of an action's story and of the queries people make (the `action_events` table of
migration 0005, the approval queue, the change feed), once for every SQL backend.

An event row is written in the same transaction as the action's change it tells: PostgreSQL in
one statement (a data-modifying CTE: still one round trip), SQLite as further statements of the
writer's transaction (the same group commit, so no extra fsync), and linked into its tenant's
hash chain (trail/chain.py). Retention deletes an action's events when they are a prefix of that chain.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from effectgate.gateway.model import ActionEvent, ListQuery, State
from effectgate.gateway.store import rows
from effectgate.gateway.store.rows import decode_cursor

EVENT_COLUMNS = "action_id, at, kind, state, principal, note, detail"
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
AWAITING = State.AWAITING_APPROVAL.value


def event_values(event: ActionEvent) -> tuple[Any, ...]:
    """The row of `event`, in `EVENT_COLUMNS` order."""
    return (
        event.action_id,
        event.at,
        event.kind,
        event.state.value,
        event.principal,
        event.note,
        _dumps(event.detail),
    )


def event_of(row: Sequence[Any]) -> ActionEvent:
    """The event of a row selected as `seq, EVENT_COLUMNS`."""
    return ActionEvent(
        seq=int(row[0]),
        action_id=row[1],
        at=float(row[2]),
        kind=row[3],
        state=State(row[4]),
        principal=row[5],
        note=row[6],
        detail=json.loads(row[7]),
    )


class StorySql:
    """The statements, written with `?` (the dialect renders them)."""

    # Parameters: action_id.
    history = f"SELECT seq, {EVENT_COLUMNS} FROM action_events WHERE action_id = ? ORDER BY seq"
    # Parameters: tool, created before, limit. Served by the partial index of migration 0005.
    awaiting = (
        f"SELECT {rows.SELECTED} FROM actions WHERE state = '{AWAITING}' AND tool = ? AND created_at < ?"
        " ORDER BY created_at, action_id LIMIT ?"
    )

    @staticmethod
    def purge_logged(select_doomed: str) -> str:
        """PostgreSQL: deletes the doomed actions and their events written before the chain
        began (n = 0) in one statement, answering (tenant, count) of what it deleted; their
        chained events go when they are a prefix of the chain (`chain.prune`)."""
        return (
            f"WITH gone AS (DELETE FROM actions WHERE action_id IN ({select_doomed}) RETURNING action_id, tenant),"
            " story AS (DELETE FROM action_events WHERE n = 0 AND action_id IN (SELECT action_id FROM gone))"
            " SELECT tenant, count(*) FROM gone GROUP BY tenant"
        )

    @staticmethod
    def changes(query: ListQuery, size: int) -> tuple[str, list[Any]]:
        """One tenant's actions in (updated_at, action_id) order after `query.after` (a cursor of
        that order), filtered like a list."""
        where = ["tenant = ?"]
        params: list[Any] = [query.tenant]
        for column, value in (("state", query.state.value if query.state else ""), ("run_id", query.run_id)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        if query.tool:
            where.append("tool = ?")
            params.append(query.tool)
        if query.after:
            updated, action_id = decode_cursor(query.after)
            where.append("updated_at >= ? AND (updated_at > ? OR action_id > ?)")
            params.extend([updated, updated, action_id])
        params.append(size)
        sql = f"SELECT {rows.SELECTED} FROM actions WHERE {' AND '.join(where)} ORDER BY updated_at, action_id LIMIT ?"
        return sql, params
