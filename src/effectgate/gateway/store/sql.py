"""The store's logic once, for every SQL backend: statements, the due-work rule, lease semantics,
paging. A backend supplies only its dialect (placeholders, `SKIP LOCKED`) and four hooks that run
one statement on its connections (`_read`, `_write_rows`, `_write_count`, `_write_many`).

Every write of the protocol is a single statement, so a backend can run it as its own transaction
(PostgreSQL, autocommit) or batch many of them into one commit (SQLite's group commit) without
changing what it means (only the bulk `insert_many` runs several, in one transaction). Lease rules, in one place:
- a lease is free when it has no owner or its expiry has passed (`lease_expires_at <= now`);
- taking it writes only the lease columns (owner, expiry, fence + 1), which are laid over the
  body's copies on every read (`rows.record`);
- every other write is conditional on the fence, so a holder that lost its lease writes nothing.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from effectgate.gateway.model import DUE, RECOVERABLE, TERMINAL, ActionRecord, ListQuery, Page, State
from effectgate.gateway.store import rows
from effectgate.gateway.store.base import Store, StoreUnavailable
from effectgate.gateway.store.evidence import SqlProviderLog

Row = Sequence[Any]


def _literals(states: frozenset[State]) -> str:
    # State names are constants of ours: literals (not parameters) let the planner use indexes.
    # In declaration order, so that a statement's text is the same in every process.
    return ", ".join(f"'{s.value}'" for s in State if s in states)


# The due-work rule (`domain.DUE`): a free lease, and either RECOVERABLE or RECHECKED with its
# re-check due (RECHECKED is DUE minus RECOVERABLE). Parameters: now, now.
DUE_WHERE = (
    f"state IN ({_literals(DUE)}) AND (lease_owner = '' OR lease_expires_at <= ?)"
    f" AND (state IN ({_literals(RECOVERABLE)}) OR next_check_at <= ?)"
)
_TERMINAL = _literals(TERMINAL)


@dataclass(frozen=True)
class Dialect:
    name: str
    # PostgreSQL numbers its parameters ($1, $2, ...); SQLite takes `?`.
    numbered: bool
    # Appended to the row selection of `claim_due`: concurrent claimers skip each other's rows.
    skip_locked: str

    def render(self, sql: str) -> str:
        """`sql` written with `?` placeholders, in this dialect."""
        if not self.numbered:
            return sql
        counter = iter(range(1, 1000))
        return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


SQLITE = Dialect("sqlite", numbered=False, skip_locked="")
POSTGRES = Dialect("postgres", numbered=True, skip_locked=" FOR UPDATE SKIP LOCKED")


class Statements:
    """Every fixed statement, rendered once for one dialect."""

    def __init__(self, d: Dialect) -> None:
        self.dialect = d
        cols = ", ".join(rows.COLUMNS)
        marks = ", ".join("?" * len(rows.COLUMNS))
        self.insert = d.render(
            f"INSERT INTO actions ({cols}) VALUES ({marks}) ON CONFLICT (action_id) DO NOTHING RETURNING action_id"
        )
        self.insert_many = d.render(f"INSERT INTO actions ({cols}) VALUES ({marks}) ON CONFLICT (action_id) DO NOTHING")
        self.get = d.render(f"SELECT {rows.SELECTED} FROM actions WHERE action_id = ?")
        # Parameters: owner, expiry, action_id, now.
        self.acquire = d.render(
            "UPDATE actions SET fence = fence + 1, lease_owner = ?, lease_expires_at = ?"
            " WHERE action_id = ? AND (lease_owner = '' OR lease_expires_at <= ?)"
            f" RETURNING {rows.SELECTED}"
        )
        # Parameters: the record's columns after action_id and fence, then action_id, fence.
        self.update = d.render(
            "UPDATE actions SET tenant = ?, run_id = ?, tool = ?, state = ?, lease_owner = ?,"
            " lease_expires_at = ?, next_check_at = ?, created_at = ?, updated_at = ?, body = ?"
            " WHERE action_id = ? AND fence = ?"
        )
        # Parameters: now, now, limit, owner, expiry. Oldest change first, ties by id.
        self.claim = d.render(
            f"WITH due AS (SELECT action_id FROM actions WHERE {DUE_WHERE}"
            f" ORDER BY updated_at, action_id LIMIT ?{d.skip_locked})"
            " UPDATE actions SET fence = fence + 1, lease_owner = ?, lease_expires_at = ?"
            f" WHERE action_id IN (SELECT action_id FROM due) RETURNING {rows.SELECTED}"
        )
        # Parameters: tool, before, limit.
        self.purge = d.render(
            "DELETE FROM actions WHERE action_id IN (SELECT action_id FROM actions"
            f" WHERE tool = ? AND created_at < ? AND state IN ({_TERMINAL}) LIMIT ?{d.skip_locked})"
        )
        # Parameters: now. The probe's own row (migration 0004), never an action.
        self.probe = d.render(
            "INSERT INTO probes (name, probed_at) VALUES ('readiness', ?)"
            " ON CONFLICT (name) DO UPDATE SET probed_at = excluded.probed_at"
        )

    def list(self, query: ListQuery, size: int) -> tuple[str, list[Any]]:
        """One tenant's actions in (created_at, action_id) order after the cursor, `size + 1` rows."""
        where = ["tenant = ?"]
        params: list[Any] = [query.tenant]
        if query.state is not None:
            where.append("state = ?")
            params.append(query.state.value)
        if query.run_id:
            where.append("run_id = ?")
            params.append(query.run_id)
        if query.tool:
            where.append("tool = ?")
            params.append(query.tool)
        if query.after:
            created, action_id = rows.decode_cursor(query.after)
            # The first term bounds an index range; the second breaks ties by id.
            where.append("created_at >= ? AND (created_at > ? OR action_id > ?)")
            params.extend([created, created, action_id])
        params.append(size + 1)
        sql = f"SELECT {rows.SELECTED} FROM actions WHERE {' AND '.join(where)} ORDER BY created_at, action_id LIMIT ?"
        return self.dialect.render(sql), params


class SqlStore(SqlProviderLog, Store):
    """The `Store` primitives on top of four hooks that run one statement each."""

    statements: Statements

    def _render(self, sql: str) -> str:
        return self.statements.dialect.render(sql)

    @abstractmethod
    async def _read(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Rows of a read-only statement."""

    async def _read_by_key(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Rows of a read-only lookup by primary key (a backend may run it more cheaply)."""
        return await self._read(sql, params)

    @abstractmethod
    async def _write_rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Runs one write statement durably (committed when this returns); its RETURNING rows."""

    @abstractmethod
    async def _write_count(self, sql: str, params: Sequence[Any]) -> int:
        """Runs one write statement durably; the number of rows it changed."""

    @abstractmethod
    async def _write_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Runs one statement for each parameter set, all in one transaction."""

    async def insert_if_absent(self, record: ActionRecord) -> tuple[ActionRecord, bool]:
        q = self.statements
        row = rows.values(record)
        # A row purged between the conflict and the read is simply retried.
        for _ in range(3):
            if await self._write_rows(q.insert, row):
                return record, True
            # Another statement: it sees the committed row that won the conflict.
            found = await self._read(q.get, (record.action_id,))
            if found:
                return rows.record(found[0]), False
        raise StoreUnavailable("action row vanished during insert")

    async def insert_many(self, records: Sequence[ActionRecord]) -> None:
        """Bulk load (benchmarks, imports): inserts in one transaction, skipping existing ids."""
        if records:
            await self._write_many(self.statements.insert_many, [rows.values(r) for r in records])

    async def get(self, action_id: str) -> ActionRecord | None:
        found = await self._read_by_key(self.statements.get, (action_id,))
        return rows.record(found[0]) if found else None

    async def acquire_lease(self, action_id: str, owner: str, now: float, ttl: float) -> ActionRecord | None:
        found = await self._write_rows(self.statements.acquire, (owner, now + ttl, action_id, now))
        return rows.record(found[0]) if found else None

    async def update(self, record: ActionRecord) -> bool:
        row = rows.values(record)
        params = (*row[1:5], *row[6:], record.action_id, record.fence)
        return await self._write_count(self.statements.update, params) == 1

    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        if limit <= 0:
            return []
        found = await self._write_rows(self.statements.claim, (now, now, limit, owner, now + ttl))
        # RETURNING has no order: the claim order is the due order, oldest change first.
        return sorted((rows.record(r) for r in found), key=lambda r: (r.updated_at, r.action_id))

    async def list(self, query: ListQuery) -> Page:
        size = rows.page_size(query)
        sql, params = self.statements.list(query, size)
        return rows.page([rows.record(r) for r in await self._read(sql, params)], size)

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        return await self._write_count(self.statements.purge, (tool, before, limit))

    async def probe(self, now: float) -> None:
        await self._write_count(self.statements.probe, (now,))
