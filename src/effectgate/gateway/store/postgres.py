"""PostgreSQL store (asyncpg) for several gateway replicas sharing one database.

Dedup rests on the primary key (`INSERT … ON CONFLICT DO NOTHING`); leases are plain columns
changed by single conditional UPDATEs, so no session state (advisory locks, temp tables) is
needed and the store works behind transaction-mode poolers. Lease acquisition writes only the
lease columns; they override the copies inside the JSON body when a row is read.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from effectgate.gateway.domain import ActionRecord, ListQuery, Page, State
from effectgate.gateway.store.base import (
    RECOVERABLE_STATES,
    Store,
    StoreUnavailable,
    decode_cursor,
    encode_cursor,
)

# Transaction-scoped advisory lock key that serialises migrations across replicas ("effect").
_MIGRATION_LOCK = 0x656666656374
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_TERMINAL = [s.value for s in State if s.terminal]
_RECOVERABLE = [s.value for s in RECOVERABLE_STATES]
_COLUMNS = "body, fence, lease_owner, lease_expires_at"
# Errors that mean "the database cannot serve us now"; all become StoreUnavailable.
# InternalClientError: asyncpg's protocol state after the server cut the connection mid-call.
_IO_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of the bundled migrations, in order."""
    folder = resources.files("effectgate.gateway.store") / "migrations" / "postgres"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


# Query options the gateway reads itself (see `PostgresStore.from_url`).
_STORE_OPTIONS = frozenset({"pool_min", "pool_max", "connect_timeout", "command_timeout", "statement_cache_size"})


class PostgresStore(Store):
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
        command_timeout: float = 10.0,
        statement_cache_size: int = 100,
    ) -> None:
        self._dsn = dsn
        self._statement_cache_size = statement_cache_size
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._command_timeout = command_timeout
        self._pool: Any = None

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """`postgresql://user:pass@host:port/db?sslmode=…`. The gateway's own options are taken out
        of the query (asyncpg would send unknown ones to the server as settings): `pool_min`,
        `pool_max`, `connect_timeout`, `command_timeout` (seconds) and `statement_cache_size`
        (0 behind PgBouncer in transaction mode)."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _STORE_OPTIONS}
        rest = urlencode([(k, v) for k, v in query if k not in _STORE_OPTIONS])
        try:
            return cls(
                urlunsplit(parts._replace(query=rest)),
                min_size=int(ours.get("pool_min", 1)),
                max_size=int(ours.get("pool_max", 10)),
                connect_timeout=float(ours.get("connect_timeout", 5.0)),
                command_timeout=float(ours.get("command_timeout", 10.0)),
                statement_cache_size=int(ours.get("statement_cache_size", 100)),
            )
        except ValueError:
            raise ValueError(f"store URL options {sorted(ours)} must be numbers") from None

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                statement_cache_size=self._statement_cache_size,
            )
        except _IO_ERRORS as exc:
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {type(exc).__name__}") from exc
        try:
            async with self._conn() as conn:
                await _migrate(conn)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with contextlib.suppress(*_IO_ERRORS):
                await pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        if self._pool is None:
            raise StoreUnavailable("store is not open")
        try:
            async with self._pool.acquire(timeout=self._connect_timeout) as conn:
                yield conn
        except _IO_ERRORS as exc:
            # The message names the error class only: server text can quote row data.
            raise StoreUnavailable(f"PostgreSQL unavailable: {type(exc).__name__}") from exc

    async def insert_if_absent(self, record: ActionRecord) -> tuple[ActionRecord, bool]:
        async with self._conn() as conn:
            # A row deleted (purged) between the conflict and the read is simply retried.
            for _ in range(3):
                inserted = await conn.fetchval(
                    """INSERT INTO actions (action_id, tenant, run_id, tool, state, fence,
                           lease_owner, lease_expires_at, next_check_at, created_at, updated_at, body)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                       ON CONFLICT (action_id) DO NOTHING
                       RETURNING true""",
                    *_row(record),
                )
                if inserted:
                    return record, True
                # A separate statement: its fresh snapshot sees the row that won the conflict.
                row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM actions WHERE action_id = $1", record.action_id)
                if row is not None:
                    return _record(row), False
        raise StoreUnavailable("action row vanished during insert")

    async def get(self, action_id: str) -> ActionRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM actions WHERE action_id = $1", action_id)
        return None if row is None else _record(row)

    async def acquire_lease(self, action_id: str, owner: str, now: float, ttl: float) -> ActionRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                f"""UPDATE actions
                    SET fence = fence + 1, lease_owner = $2, lease_expires_at = $3::float8 + $4::float8
                    WHERE action_id = $1 AND (lease_owner = '' OR lease_expires_at <= $3)
                    RETURNING {_COLUMNS}""",
                action_id,
                owner,
                now,
                ttl,
            )
        return None if row is None else _record(row)

    async def update(self, record: ActionRecord) -> bool:
        async with self._conn() as conn:
            status = await conn.execute(
                """UPDATE actions
                   SET tenant = $2, run_id = $3, tool = $4, state = $5, lease_owner = $7,
                       lease_expires_at = $8, next_check_at = $9, created_at = $10,
                       updated_at = $11, body = $12
                   WHERE action_id = $1 AND fence = $6""",
                *_row(record),
            )
        return bool(status == "UPDATE 1")

    async def claim_due(self, owner: str, now: float, ttl: float, limit: int) -> list[ActionRecord]:
        if limit <= 0:
            return []
        # One statement: the row locks taken by SKIP LOCKED are held until the lease columns are
        # written, so two claimers never lease the same action.
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"""WITH due AS (
                        SELECT action_id FROM actions
                        WHERE (lease_owner = '' OR lease_expires_at <= $2)
                          AND (state = ANY($5::text[])
                               OR (state = 'UNKNOWN' AND next_check_at <= $2))
                        ORDER BY updated_at, action_id
                        LIMIT $4
                        FOR UPDATE SKIP LOCKED)
                    UPDATE actions AS a
                    SET fence = a.fence + 1, lease_owner = $1,
                        lease_expires_at = $2::float8 + $3::float8
                    FROM due WHERE a.action_id = due.action_id
                    RETURNING {", ".join("a." + c for c in _COLUMNS.split(", "))},
                              a.updated_at, a.action_id""",
                owner,
                now,
                ttl,
                limit,
                _RECOVERABLE,
            )
        rows = sorted(rows, key=lambda r: (r["updated_at"], r["action_id"]))
        return [_record(r) for r in rows]

    async def list(self, query: ListQuery) -> Page:
        where = ["tenant = $1"]
        args: list[Any] = [query.tenant]

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if query.state is not None:
            where.append(f"state = {arg(query.state.value)}")
        if query.run_id:
            where.append(f"run_id = {arg(query.run_id)}")
        if query.tool:
            where.append(f"tool = {arg(query.tool)}")
        if query.after:
            created, action_id = decode_cursor(query.after)
            where.append(f"(created_at, action_id) > ({arg(created)}::float8, {arg(action_id)})")
        size = max(1, query.page_size)
        sql = (
            f"SELECT {_COLUMNS} FROM actions WHERE {' AND '.join(where)} "
            f"ORDER BY created_at, action_id LIMIT {arg(size + 1)}"
        )
        async with self._conn() as conn:
            rows = await conn.fetch(sql, *args)
        records = [_record(r) for r in rows[:size]]
        more = len(rows) > size
        token = encode_cursor(records[-1].created_at, records[-1].action_id) if more else ""
        return Page(records=records, next_token=token)

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        async with self._conn() as conn:
            status = await conn.execute(
                """DELETE FROM actions WHERE action_id IN (
                       SELECT action_id FROM actions
                       WHERE tool = $1 AND created_at < $2 AND state = ANY($3::text[])
                       ORDER BY created_at LIMIT $4
                       FOR UPDATE SKIP LOCKED)""",
                tool,
                before,
                _TERMINAL,
                limit,
            )
        return int(status.split()[-1])


async def _migrate(conn: Any) -> None:
    """Applies the bundled migrations not yet recorded, in one transaction.

    The transaction-scoped advisory lock makes replicas starting together wait for each other
    (and is released at commit, so it is safe behind poolers)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version INTEGER PRIMARY KEY,
                   name TEXT NOT NULL,
                   applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"""
        )
        applied = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for version, name, sql in migrations():
            if version not in applied:
                await conn.execute(sql)
                await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)


def _row(r: ActionRecord) -> Sequence[Any]:
    return (
        r.action_id,
        r.tenant,
        r.run_id,
        r.tool,
        r.state.value,
        r.fence,
        r.lease_owner,
        r.lease_expires_at,
        r.next_check_at,
        r.created_at,
        r.updated_at,
        r.to_json(),
    )


def _record(row: Any) -> ActionRecord:
    return ActionRecord.from_json(row["body"]).evolve(
        fence=row["fence"], lease_owner=row["lease_owner"], lease_expires_at=row["lease_expires_at"]
    )
