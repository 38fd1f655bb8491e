"""The store's logic once, for every SQL backend: statements, the due-work rule, lease semantics,
paging. A backend supplies only its dialect (placeholders, `SKIP LOCKED`) and four hooks that run
one statement on its connections (`_read`, `_write_rows`, `_write_count`, `_write_many`).

Every write of the protocol is a single statement, so a backend can run it as its own transaction
(PostgreSQL, autocommit) or batch many of them into one commit (SQLite's group commit) without
changing what it means (only the bulk `insert_many` and the limits' scripts, `_transact`, run
several, in one transaction). Lease rules, in one place:
- a lease is free when it has no owner or its expiry has passed (`lease_expires_at <= now`);
- taking it writes only the lease columns (owner, expiry, fence + 1), which are laid over the
  body's copies on every read (`rows.record`);
- every other write is conditional on the fence, so a holder that lost its lease writes nothing.
"""

from __future__ import annotations

import builtins
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from effectgate.gateway.model import (
    DUE,
    RECOVERABLE,
    TERMINAL,
    ActionEvent,
    ActionRecord,
    LimitGrant,
    ListQuery,
    Page,
    Reservation,
    Ruling,
    State,
)
from effectgate.gateway.store import accounting, rows
from effectgate.gateway.store.accounting import AccountingStatements
from effectgate.gateway.store.action_events import StorySql, event_of
from effectgate.gateway.store.base import Store, Usage
from effectgate.gateway.store.evidence import SqlProviderLog
from effectgate.gateway.store.faults import StoreUnavailable
from effectgate.gateway.store.sql_primitives import Dialect, Row, Script
from effectgate.gateway.store.trail import chain
from effectgate.gateway.store.trail.outbox import SqlNotifyOutbox
from effectgate.gateway.store.trail.reads import SqlTrail


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


class Statements:
    """Every fixed statement, rendered once for one dialect."""

    def __init__(self, d: Dialect) -> None:
        self.dialect = d
        cols = ", ".join(rows.COLUMNS)
        marks = ", ".join("?" * len(rows.COLUMNS))
        insert = f"INSERT INTO actions ({cols}) VALUES ({marks}) ON CONFLICT (action_id) DO NOTHING RETURNING action_id"
        self.insert = d.render(insert)
        self.insert_many = d.render(f"INSERT INTO actions ({cols}) VALUES ({marks}) ON CONFLICT (action_id) DO NOTHING")
        self.get = d.render(f"SELECT {rows.SELECTED} FROM actions WHERE action_id = ?")
        # Parameters: owner, expiry, action_id, now.
        self.acquire = d.render(
            "UPDATE actions SET fence = fence + 1, lease_owner = ?, lease_expires_at = ?"
            " WHERE action_id = ? AND (lease_owner = '' OR lease_expires_at <= ?)"
            f" RETURNING {rows.SELECTED}"
        )
        # Parameters: the record's columns after action_id and fence, then action_id, fence.
        update = (
            "UPDATE actions SET tenant = ?, run_id = ?, tool = ?, state = ?, lease_owner = ?,"
            " lease_expires_at = ?, next_check_at = ?, created_at = ?, updated_at = ?, body = ?"
            " WHERE action_id = ? AND fence = ?"
        )
        self.update = d.render(update)
        # The same, answering a row when it wrote (a script sees rows, not counts).
        self.update_returning = d.render(
            "UPDATE actions SET tenant = ?, run_id = ?, tool = ?, state = ?, lease_owner = ?,"
            " lease_expires_at = ?, next_check_at = ?, created_at = ?, updated_at = ?, body = ?"
            " WHERE action_id = ? AND fence = ? RETURNING action_id"
        )
        # Parameters: now, now, limit, owner, expiry. Oldest change first, ties by id.
        self.claim = d.render(
            f"WITH due AS (SELECT action_id FROM actions WHERE {DUE_WHERE}"
            f" ORDER BY updated_at, action_id LIMIT ?{d.skip_locked})"
            " UPDATE actions SET fence = fence + 1, lease_owner = ?, lease_expires_at = ?"
            f" WHERE action_id IN (SELECT action_id FROM due) RETURNING {rows.SELECTED}"
        )
        # Parameters: tool, before, limit.
        self.doomed = d.render(
            f"SELECT action_id FROM actions WHERE tool = ? AND created_at < ? AND state IN ({_TERMINAL})"
            f" LIMIT ?{d.skip_locked}"
        )
        # PostgreSQL deletes the actions and their stories in one statement; SQLite (no DML in a
        # CTE) runs `doomed` and two deletes in one transaction instead (sqlite.py).
        purge = StorySql.purge_logged if d.numbered else "DELETE FROM actions WHERE action_id IN ({})".format
        self.purge = purge(self.doomed)
        # The story (action_events.py) in its chain (trail/chain.py): events, and on PostgreSQL the change with
        # its event in one statement. SQLite: the tenants of the doomed, the story before the chain.
        self.chain = chain.ChainStatements(d.numbered, d.render)
        self.prune = chain.PruneStatements(d.render)
        self.history = d.render(StorySql.history)
        self.awaiting = d.render(StorySql.awaiting)
        self.insert_logged = d.render(chain.logged_insert(insert))
        self.update_logged = d.render(chain.logged_update(update))
        self.doomed_tenants = d.render(
            "SELECT action_id, tenant FROM actions WHERE tool = ? AND created_at < ?"
            f" AND state IN ({_TERMINAL}) LIMIT ?"
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


class SqlStore(SqlTrail, SqlProviderLog, SqlNotifyOutbox, Store):
    """The `Store` primitives on top of four hooks that run one statement each."""

    statements: Statements
    accounting: AccountingStatements

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

    @abstractmethod
    async def _transact(self, script: Script) -> Any:
        """Runs a script (store/accounting.py) in one transaction: each statement it yields, its
        rows sent back; commits when it returns (its value), rolls back when it raises."""

    # -- limits ------------------------------------------------------------------------------

    async def claim(
        self,
        record: ActionRecord,
        reservation: Reservation,
        event: ActionEvent | None = None,
        ruling: Ruling | None = None,
    ) -> tuple[ActionRecord, bool]:
        return await self._transact(self._claim(record, reservation, event, ruling))  # type: ignore[no-any-return]

    def _claim(
        self, record: ActionRecord, reservation: Reservation, event: ActionEvent | None, ruling: Ruling | None
    ) -> Script:
        q = self.statements
        if (yield q.insert, rows.values(record)):
            # The story goes last: the chain's head is the last row a transaction locks.
            story = [event] if ruling is None and event is not None else []
            story += yield from accounting.reserve(
                self.accounting, record.action_id, record.generation, reservation, record.state
            )
            if ruling is not None:
                # Decided here, on the counters this transaction has locked (accounting.py).
                counters = yield from accounting.counters_before(self.accounting, reservation, ruling.keys)
                if ruling.holds(counters):
                    held = ruling.held
                    row = rows.values(held)
                    yield q.update_returning, (*row[1:5], *row[6:], held.action_id, held.fence)
                    record, event = held, ruling.held_event
                if event is not None:
                    story.append(event)
            for entry in story:
                yield from chain.append(q.chain, entry, record.tenant, record.tool)
            return record, True
        found = yield q.get, (record.action_id,)
        if not found:
            raise StoreUnavailable("action row vanished during insert")
        return rows.record(found[0]), False

    async def update_accounted(
        self,
        record: ActionRecord,
        *,
        hold: Reservation | None = None,
        release: bool = False,
        event: ActionEvent | None = None,
    ) -> bool:
        script = self._update_accounted(record, hold, release, event)
        return await self._transact(script)  # type: ignore[no-any-return]

    def _update_accounted(
        self, record: ActionRecord, hold: Reservation | None, release: bool, event: ActionEvent | None
    ) -> Script:
        row = rows.values(record)
        params = (*row[1:5], *row[6:], record.action_id, record.fence)
        if not (yield self.statements.update_returning, params):
            return False
        story = [] if event is None else [event]
        if release:
            yield from accounting.release(self.accounting, record.action_id, record.generation)
        if hold is not None:
            story += yield from accounting.hold(
                self.accounting, record.action_id, record.generation, hold, record.state
            )
        # The story goes last: the chain's head is the last row a transaction locks.
        for entry in story:
            yield from chain.append(self.statements.chain, entry, record.tenant, record.tool)
        return True

    async def release_reservation(self, action_id: str, generation: int) -> bool:
        return bool(await self._transact(accounting.release(self.accounting, action_id, generation)))

    async def usage(self, tenant: str, tool: str) -> builtins.list[Usage]:
        found = await self._read(self.accounting.usage, (tenant, tool))
        return [(str(c), str(b), int(e), int(s)) for c, b, e, s in found]

    async def grant_limit(self, grant: LimitGrant) -> None:
        await self._transact(accounting.grant(self.accounting, grant))

    async def _insert_logged(self, record: ActionRecord, event: ActionEvent, row: tuple[Any, ...]) -> bool:
        """Inserts the record (`row`: its `rows.values`) and, if inserted, its event in its chain, in
        one transaction (here: one statement; a backend without data-modifying CTEs overrides this)."""
        logged = chain.logged_params(event, record.tenant, record.tool)
        return bool(await self._write_rows(self.statements.insert_logged, (*row, *logged)))

    async def _update_logged(self, record: ActionRecord, event: ActionEvent) -> bool:
        """The fenced update and, if it wrote, its event, in one transaction (see `_insert_logged`)."""
        logged = chain.logged_params(event, record.tenant, record.tool)
        found = await self._write_rows(self.statements.update_logged, (*update_params(record), *logged))
        return bool(found) and int(found[0][0]) == 1

    async def insert_if_absent(
        self, record: ActionRecord, event: ActionEvent | None = None
    ) -> tuple[ActionRecord, bool]:
        q = self.statements
        row = rows.values(record)  # encoded once, for every try
        # A row purged between the conflict and the read is simply retried.
        for _ in range(3):
            if event is not None:
                if await self._insert_logged(record, event, row):
                    return record, True
            elif await self._write_rows(q.insert, row):
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

    async def update(self, record: ActionRecord, event: ActionEvent | None = None) -> bool:
        if event is not None:
            return await self._update_logged(record, event)
        return await self._write_count(self.statements.update, update_params(record)) == 1

    async def history(self, action_id: str) -> list[ActionEvent]:
        return [event_of(r) for r in await self._read(self.statements.history, (action_id,))]

    async def awaiting(self, tool: str, created_before: float, limit: int) -> list[ActionRecord]:
        if limit <= 0:
            return []
        found = await self._read(self.statements.awaiting, (tool, created_before, limit))
        return rows.readable(found)  # the expiry's batch: a newer gateway's record is its own to expire

    async def changes(self, query: ListQuery) -> list[ActionRecord]:
        sql, params = StorySql.changes(query, rows.page_size(query))
        return [rows.record(r) for r in await self._read(self.statements.dialect.render(sql), params)]

    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        if limit <= 0:
            return []
        found = await self._write_rows(self.statements.claim, (now, now, limit, owner, now + ttl))
        # RETURNING has no order: the claim order is the due order, oldest change first.
        return sorted(rows.readable(found), key=lambda r: (r.updated_at, r.action_id))

    async def list(self, query: ListQuery) -> Page:
        size = rows.page_size(query)
        sql, params = self.statements.list(query, size)
        return rows.page([rows.record(r) for r in await self._read(sql, params)], size)

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        found = await self._write_rows(self.statements.purge, (tool, before, limit))
        for tenant, _ in found:
            await self._transact(chain.prune(self.statements.prune, str(tenant)))
        return sum(int(count) for _, count in found)

    async def probe(self, now: float) -> None:
        await self._write_count(self.statements.probe, (now,))


def update_params(record: ActionRecord) -> tuple[Any, ...]:
    """The parameters of the fenced update: the columns after action_id and fence, then those two."""
    row = rows.values(record)
    return (*row[1:5], *row[6:], record.action_id, record.fence)
