"""PostgreSQL store (asyncpg) for several gateway replicas sharing one database.

The statements and their rules are the shared ones (`sql.SqlStore`); this module supplies the
connections. Every write is one statement in its own (autocommit) transaction: one round trip per
primitive, prepared once per connection by asyncpg's statement cache. The exception is the
writes of a tool with limits (`_transact`): the claim and its reservation, and a write that
releases or takes one again, are one explicit transaction (store/accounting.py). No session state (advisory
locks, temp tables) is kept, so the store works behind transaction-mode poolers, and a pooled
connection is handed back without a reset round trip (see `_reset`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from effectgate.gateway.store import schema
from effectgate.gateway.store.accounting import AccountingStatements
from effectgate.gateway.store.faults import SchemaBehind, StoreRefused, StoreUnavailable, postgres_error
from effectgate.gateway.store.registry import redact_url
from effectgate.gateway.store.sql import SqlStore, Statements
from effectgate.gateway.store.sql_primitives import POSTGRES, Row, Script

# Transaction-scoped advisory lock key that serialises migrations across replicas ("effect").
_MIGRATION_LOCK = 0x656666656374
# Errors of a statement or a connection; store/faults.py names each: an outage (StoreUnavailable)
# or data refused for good. InternalClientError: asyncpg's protocol state after the server cut
# the connection mid-call.
_IO_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OverflowError,
    OSError,
    TimeoutError,
)
# Refusals a wait cannot fix: a wrong or missing password, an unknown role (28xxx), a missing
# database (3D000), no CONNECT privilege (42501). Their server text quotes no row data.
_REFUSED = (
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
    asyncpg.InsufficientPrivilegeError,
)


def migrations() -> list[schema.Migration]:
    """The bundled PostgreSQL migrations, in order."""
    return schema.load("postgres")


async def _reset(conn: Any) -> None:
    """Hands a connection back to the pool. asyncpg's default reset costs a round trip per use
    (RESET ALL, UNLISTEN *, advisory unlock); the store sets no session state, so there is nothing
    to reset. (The pool itself still rolls back an interrupted transaction before calling this.)"""


_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
# Query options the gateway reads itself (see `PostgresStore.from_url`).
_STORE_OPTIONS = frozenset({"pool_min", "pool_max", "connect_timeout", "command_timeout", "statement_cache_size"})


class PostgresStore(SqlStore):
    statements = Statements(POSTGRES)
    accounting = AccountingStatements(POSTGRES)

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

    def redacted_url(self) -> str:
        return redact_url(self._dsn)

    def describe(self) -> str:
        return f"{self.redacted_url()} (pool {self._min_size}-{self._max_size})"

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._min_size,
                max_size=self._max_size,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                statement_cache_size=self._statement_cache_size,
                reset=_reset,
            )
        except _REFUSED as exc:
            raise StoreRefused(f"PostgreSQL refused the connection: {_said(exc)}") from exc
        except _IO_ERRORS as exc:
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {_said(exc)}") from exc
        try:
            async with self._conn() as conn:
                self.applied = await _migrate(conn, self.migrate_on_open)
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
            raise postgres_error(exc) from exc

    async def clock(self) -> float | None:
        # clock_timestamp(), not now(): now() is the start of the transaction.
        async with self._conn() as conn:
            return float(await conn.fetchval(_CLOCK))

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Row]:
        async with self._conn() as conn:
            return list(await conn.fetch(sql, *params))

    async def _write_rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        async with self._conn() as conn:
            return list(await conn.fetch(sql, *params))

    async def _write_count(self, sql: str, params: Sequence[Any]) -> int:
        async with self._conn() as conn:
            status = await conn.execute(sql, *params)
        return int(status.split()[-1])

    async def _write_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        async with self._conn() as conn, conn.transaction():
            await conn.executemany(sql, params)

    async def _transact(self, script: Script) -> Any:
        async with self._conn() as conn, conn.transaction():
            try:
                sql, params = next(script)
                while True:
                    sql, params = script.send(list(await conn.fetch(sql, *params)))
            except StopIteration as done:
                return done.value


def _said(exc: BaseException) -> str:
    """The driver's class and message on one line (connection errors name the user or database,
    never a password)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _missing(conn: Any) -> list[schema.Migration]:
    """The bundled migrations not recorded yet: reads only (a row-only role may ask)."""
    if await conn.fetchval("SELECT to_regclass('schema_migrations') IS NULL"):
        return migrations()
    applied = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
    return [m for m in migrations() if m.version not in applied]


async def _migrate(conn: Any, allowed: bool) -> tuple[str, ...]:
    """Applies the bundled migrations not yet recorded, in one transaction; the names applied.

    A current schema is only read: no DDL, no lock, so a role without DDL rights starts. The
    transaction-scoped advisory lock makes replicas starting together wait for each other (and is
    released at commit, so it is safe behind poolers)."""
    try:
        missing = await _missing(conn)
    except asyncpg.InsufficientPrivilegeError as exc:
        raise StoreRefused(
            f"this role may not read the gateway's tables ({_said(exc)}): grant it SELECT, INSERT, "
            "UPDATE, DELETE on them (docs/production.md, PostgreSQL roles)"
        ) from exc
    if not missing:
        return ()
    if not allowed:
        raise SchemaBehind(schema.behind(missing))
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await conn.execute(schema.SCHEMA_MIGRATIONS["postgres"])
            missing = await _missing(conn)  # another replica may have applied them meanwhile
            for migration in missing:
                await conn.execute(migration.sql)
                await conn.execute(POSTGRES.render(schema.RECORD), migration.version, migration.name)
    except asyncpg.InsufficientPrivilegeError as exc:
        raise StoreRefused(schema.no_ddl(_said(exc))) from exc
    return tuple(m.name for m in missing)
