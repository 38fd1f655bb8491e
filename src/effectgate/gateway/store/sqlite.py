"""SQLite store (aiosqlite): the embedded default.

WAL journal, explicit `BEGIN IMMEDIATE` for every read-then-write (a deferred transaction that
upgrades to a write can fail with SQLITE_BUSY despite the busy timeout), `synchronous=FULL` by
default so that an acknowledged commit survives power loss — the right default for money.
URL: `sqlite:///relative/or/absolute.db?synchronous=NORMAL&busy_timeout_ms=5000`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiosqlite

from effectgate.gateway.domain import ActionRecord, ListQuery, Page, State
from effectgate.gateway.store.base import (
    RECOVERABLE_STATES,
    Store,
    StoreUnavailable,
    decode_cursor,
    encode_cursor,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS actions (
    action_id        TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    run_id           TEXT NOT NULL,
    tool             TEXT NOT NULL,
    state            TEXT NOT NULL,
    fence            INTEGER NOT NULL,
    lease_owner      TEXT NOT NULL,
    lease_expires_at REAL NOT NULL,
    next_check_at    REAL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    body             TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_due_unknown ON actions (state, next_check_at);
CREATE INDEX IF NOT EXISTS actions_due_lease ON actions (state, lease_expires_at);
CREATE INDEX IF NOT EXISTS actions_tenant_created ON actions (tenant, created_at, action_id);
CREATE INDEX IF NOT EXISTS actions_run ON actions (run_id);
CREATE INDEX IF NOT EXISTS actions_tool_created ON actions (tool, created_at);
"""

COLUMNS = (
    "action_id, tenant, run_id, tool, state, fence, lease_owner, lease_expires_at,"
    " next_check_at, created_at, updated_at, body"
)
SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def _row(record: ActionRecord) -> tuple[Any, ...]:
    return (
        record.action_id,
        record.tenant,
        record.run_id,
        record.tool,
        record.state.value,
        record.fence,
        record.lease_owner,
        record.lease_expires_at,
        record.next_check_at,
        record.created_at,
        record.updated_at,
        record.to_json(),
    )


class SqliteStore(Store):
    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout_ms: int = 5000) -> None:
        if synchronous.upper() not in SYNC_MODES:
            raise ValueError(f"synchronous must be one of {SYNC_MODES}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        # One connection serves every coroutine: without this lock their transactions interleave
        # ("cannot start a transaction within a transaction", reads of uncommitted rows).
        self._lock = asyncio.Lock()

    @classmethod
    def from_url(cls, url: str) -> SqliteStore:
        parsed = urlparse(url)
        # sqlite:///var/x.db -> "var/x.db" (relative), sqlite:////var/x.db -> "/var/x.db".
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        if not path:
            raise ValueError("sqlite URL needs a file path, e.g. sqlite:///effectgate.db")
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        return cls(
            path,
            synchronous=options.get("synchronous", "FULL"),
            busy_timeout_ms=int(options.get("busy_timeout_ms", "5000")),
        )

    async def open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
            await self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            await self._enable_wal(self._db)
            await self._db.execute(f"PRAGMA synchronous = {self.synchronous}")
            await self._db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc

    async def _enable_wal(self, db: aiosqlite.Connection) -> None:
        # Switching a new file to WAL fails at once ("database is locked", no busy handler)
        # while another process opens the same file: retry within the busy timeout.
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                await db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.01)

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()
            self._db = None

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreUnavailable("store is not open")
        return self._db

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One IMMEDIATE transaction; any SQLite error means nothing durable happened."""
        db = self.db
        async with self._lock:
            try:
                await db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"SQLite store cannot start a write: {exc}") from exc
            try:
                yield db
                await db.execute("COMMIT")
            except BaseException as exc:
                with suppress(sqlite3.Error):
                    await db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreUnavailable(f"SQLite write failed: {exc}") from exc
                raise

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[ActionRecord]:
        try:
            async with self._lock, self.db.execute(sql, params) as cursor:
                rows = await cursor.fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite read failed: {exc}") from exc
        return [ActionRecord.from_json(row[0]) for row in rows]

    async def insert_if_absent(self, record: ActionRecord) -> tuple[ActionRecord, bool]:
        async with self._write() as db:
            cursor = await db.execute(
                f"INSERT OR IGNORE INTO actions ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                _row(record),
            )
            if cursor.rowcount == 1:
                return record, True
            async with db.execute("SELECT body FROM actions WHERE action_id = ?", (record.action_id,)) as existing:
                row = await existing.fetchone()
        if row is None:  # pragma: no cover - INSERT OR IGNORE ignored for another reason
            raise StoreUnavailable("insert ignored but no row found")
        return ActionRecord.from_json(row[0]), False

    async def get(self, action_id: str) -> ActionRecord | None:
        found = await self._fetch("SELECT body FROM actions WHERE action_id = ?", (action_id,))
        return found[0] if found else None

    async def acquire_lease(self, action_id: str, owner: str, now: float, ttl: float) -> ActionRecord | None:
        async with self._write() as db:
            async with db.execute(
                "SELECT body FROM actions WHERE action_id = ? AND (lease_owner = '' OR lease_expires_at <= ?)",
                (action_id, now),
            ) as cursor:
                row = await cursor.fetchone()
            if row is None:
                return None
            current = ActionRecord.from_json(row[0])
            leased = current.evolve(fence=current.fence + 1, lease_owner=owner, lease_expires_at=now + ttl)
            await db.execute(
                "UPDATE actions SET fence = ?, lease_owner = ?, lease_expires_at = ?, body = ? WHERE action_id = ?",
                (leased.fence, owner, leased.lease_expires_at, leased.to_json(), action_id),
            )
            return leased

    async def update(self, record: ActionRecord) -> bool:
        row = _row(record)
        async with self._write() as db:
            cursor = await db.execute(
                "UPDATE actions SET tenant=?, run_id=?, tool=?, state=?, fence=?, lease_owner=?,"
                " lease_expires_at=?, next_check_at=?, created_at=?, updated_at=?, body=?"
                " WHERE action_id = ? AND fence = ?",
                (*row[1:], record.action_id, record.fence),
            )
            return cursor.rowcount == 1

    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        recoverable = tuple(s.value for s in RECOVERABLE_STATES)
        claimed: list[ActionRecord] = []
        async with self._write() as db:
            async with db.execute(
                "SELECT body FROM actions WHERE"
                f" (state IN ({','.join('?' * len(recoverable))}) AND lease_expires_at <= ?)"
                " OR (state = ? AND next_check_at <= ? AND lease_expires_at <= ?)"
                " ORDER BY updated_at LIMIT ?",
                (*recoverable, now, State.UNKNOWN.value, now, now, limit),
            ) as cursor:
                rows = await cursor.fetchall()
            for (body,) in rows:
                current = ActionRecord.from_json(body)
                leased = current.evolve(fence=current.fence + 1, lease_owner=owner, lease_expires_at=now + ttl)
                await db.execute(
                    "UPDATE actions SET fence = ?, lease_owner = ?, lease_expires_at = ?, body = ? WHERE action_id = ?",
                    (leased.fence, owner, leased.lease_expires_at, leased.to_json(), leased.action_id),
                )
                claimed.append(leased)
        return claimed

    async def list(self, query: ListQuery) -> Page:
        where: list[str] = ["tenant = ?"]
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
            created, action_id = decode_cursor(query.after)
            where.append("(created_at > ? OR (created_at = ? AND action_id > ?))")
            params.extend([created, created, action_id])
        records = await self._fetch(
            f"SELECT body FROM actions WHERE {' AND '.join(where)} ORDER BY created_at, action_id LIMIT ?",
            [*params, query.page_size + 1],
        )
        if len(records) <= query.page_size:
            return Page(records, "")
        last = records[query.page_size - 1]
        return Page(records[: query.page_size], encode_cursor(last.created_at, last.action_id))

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        async with self._write() as db:
            cursor = await db.execute(
                "DELETE FROM actions WHERE action_id IN (SELECT action_id FROM actions"
                " WHERE tool = ? AND created_at < ? AND state IN (?, ?) LIMIT ?)",
                (tool, before, State.CONFIRMED.value, State.REJECTED.value, limit),
            )
            return cursor.rowcount
