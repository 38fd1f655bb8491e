"""SQLite store: the embedded default.

WAL journal; every write is a `BEGIN IMMEDIATE` transaction (a deferred one that upgrades to a
write can fail with SQLITE_BUSY despite the busy timeout), batched with its neighbours into one
commit by a single writer thread (`sqlite_io.Writer`); reads run on their own connections (a
lookup by key on the event loop itself, the rest in a small reader pool).
`synchronous=FULL` by default, so that an acknowledged write survives power loss — the right
default for money. A store that cannot write within the busy timeout raises `StoreUnavailable`.

The database and its -wal/-shm files hold payloads: a new database file is created 0600 (SQLite
gives -wal and -shm the mode of the database file) and a missing directory 0700.
URL: `sqlite:///relative/or/absolute.db?synchronous=NORMAL&busy_timeout_ms=5000`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

from effectgate.gateway.model import ActionEvent, ActionRecord
from effectgate.gateway.store import schema
from effectgate.gateway.store.accounting import AccountingStatements
from effectgate.gateway.store.faults import SchemaBehind, StoreUnavailable
from effectgate.gateway.store.sql import SqlStore, Statements, update_params
from effectgate.gateway.store.sql_primitives import SQLITE, Row, Script
from effectgate.gateway.store.sqlite_io import Readers, Writer, read_error
from effectgate.gateway.store.trail import chain

SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
READERS = 2
T = TypeVar("T")


class SqliteStore(SqlStore):
    statements = Statements(SQLITE)
    accounting = AccountingStatements(SQLITE)

    def __init__(self, path: str, *, synchronous: str = "FULL", busy_timeout_ms: int = 5000) -> None:
        if synchronous.upper() not in SYNC_MODES:
            raise ValueError(f"synchronous must be one of {SYNC_MODES}")
        if path == ":memory:" or not path:
            raise ValueError("the SQLite store needs a database file, e.g. sqlite:///effectgate.db")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self._writer: Writer | None = None
        self._readers: Readers | None = None
        self._inline: sqlite3.Connection | None = None

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

    def redacted_url(self) -> str:
        return f"sqlite:///{self.path}"

    def describe(self) -> str:
        return f"{self.redacted_url()} (synchronous={self.synchronous})"

    def _connect(self, busy_timeout_ms: int | None = None) -> sqlite3.Connection:
        timeout_ms = self.busy_timeout_ms if busy_timeout_ms is None else busy_timeout_ms
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=timeout_ms / 1000)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
        return conn

    def _connect_reader(self, busy_timeout_ms: int | None = None) -> sqlite3.Connection:
        conn = self._connect(busy_timeout_ms)
        conn.execute("PRAGMA query_only = ON")
        return conn

    async def open(self) -> None:
        try:
            conn = await asyncio.to_thread(self._open_writer)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc
        self._writer = Writer(conn)
        self._readers = Readers(self._connect_reader, size=READERS)
        try:
            self._inline = self._connect_reader(busy_timeout_ms=0)
        except sqlite3.Error as exc:
            await self.close()
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc

    def _open_writer(self) -> sqlite3.Connection:
        _create_private(Path(self.path))
        conn = self._connect()
        try:
            self._enable_wal(conn)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            self.applied = _migrate(conn, self.migrate_on_open)
        except BaseException:
            conn.close()
            raise
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL fails at once ("database is locked", no busy handler)
        # while another process opens the same file: retry within the busy timeout.
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    async def close(self) -> None:
        inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        writer, self._writer = self._writer, None
        readers, self._readers = self._readers, None
        if writer is not None:
            await writer.close()
        if readers is not None:
            await readers.close()

    async def _transaction(
        self, fn: Callable[[sqlite3.Connection], T], *, single_statement: bool = False, rerunnable: bool = False
    ) -> T:
        if self._writer is None:
            raise StoreUnavailable("store is not open")
        return await self._writer.transaction(fn, single_statement=single_statement, rerunnable=rerunnable)

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Row]:
        if self._readers is None:
            raise StoreUnavailable("store is not open")
        try:
            return await self._readers.read(lambda c: c.execute(sql, params).fetchall())
        except (sqlite3.Error, OverflowError) as exc:
            raise read_error(exc) from exc

    async def _read_by_key(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """A primary-key lookup runs right here on the event loop: a few microseconds, where a
        hop to a reader thread and back costs about 100. In WAL mode a reader waits for no
        writer; this connection has no busy timeout, so the rare SQLITE_BUSY (another process
        recovering the WAL) or any other failure is retried on the reader pool, never waited
        out on the loop."""
        conn = self._inline
        if conn is None:
            raise StoreUnavailable("store is not open")
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error:
            return await self._read(sql, params)

    async def _write_rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        return await self._transaction(lambda c: c.execute(sql, params).fetchall(), single_statement=True)

    async def _write_count(self, sql: str, params: Sequence[Any]) -> int:
        return await self._transaction(lambda c: c.execute(sql, params).rowcount, single_statement=True)

    async def _write_many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        await self._transaction(lambda c: c.executemany(sql, params))

    # SQLite has no data-modifying CTEs: the event (with its chain's head, trail/chain.py) is more
    # statements of the same transaction (the same group commit: no extra fsync). They only run
    # statements, so the writer may run them again and needs no savepoint for them in a batch
    # (sqlite_io.Writer).

    async def _insert_logged(self, record: ActionRecord, event: ActionEvent, row: tuple[Any, ...]) -> bool:
        q = self.statements

        def insert(c: sqlite3.Connection) -> bool:
            if not c.execute(q.insert, row).fetchall():
                return False
            _run(c, chain.append(q.chain, event, record.tenant, record.tool))
            return True

        return await self._transaction(insert, rerunnable=True)

    async def _update_logged(self, record: ActionRecord, event: ActionEvent) -> bool:
        q = self.statements
        params = update_params(record)

        def update(c: sqlite3.Connection) -> bool:
            if c.execute(q.update, params).rowcount != 1:
                return False
            _run(c, chain.append(q.chain, event, record.tenant, record.tool))
            return True

        return await self._transaction(update, rerunnable=True)

    async def purge(self, tool: str, before: float, limit: int = 1000) -> int:
        """The doomed actions and their events written before the chain began; then each of their
        tenants' chain prefix whose actions are all gone (chain.prune), in one transaction."""
        if limit <= 0:
            return 0
        q = self.statements

        def purge(c: sqlite3.Connection) -> int:
            doomed = c.execute(q.doomed_tenants, (tool, before, limit)).fetchall()
            ids = [(action_id,) for action_id, _ in doomed]
            c.executemany("DELETE FROM action_events WHERE n = 0 AND action_id = ?", ids)
            c.executemany("DELETE FROM actions WHERE action_id = ?", ids)
            for tenant in sorted({str(t) for _, t in doomed}):
                _run(c, chain.prune(q.prune, tenant))
            return len(doomed)

        return await self._transaction(purge)

    async def _transact(self, script: Script) -> Any:
        return await self._transaction(lambda conn: _run(conn, script))

    @property
    def commits(self) -> tuple[int, int]:
        """(commits, transactions) made by this store's writer: how well group commit batches."""
        return (0, 0) if self._writer is None else (self._writer.batches, self._writer.transactions)


def _run(conn: sqlite3.Connection, script: Script) -> Any:
    """Runs a script's statements on `conn` (in the caller's transaction); its value."""
    try:
        statement = next(script)
        while True:
            statement = script.send(conn.execute(*statement).fetchall())
    except StopIteration as done:
        return done.value


def _create_private(path: Path) -> None:
    """Creates missing directories 0700 and a missing database file 0600 (empty = valid SQLite)."""
    missing: list[Path] = []
    parent = path.absolute().parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _missing(conn: sqlite3.Connection) -> list[schema.Migration]:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
    applied = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")} if found.fetchone() else set()
    return [m for m in schema.load("sqlite") if m.version not in applied]


def _migrate(conn: sqlite3.Connection, allowed: bool) -> tuple[str, ...]:
    """Applies the missing migrations in one IMMEDIATE transaction (processes starting together
    wait for each other on the write lock); the names applied. A current schema is only read."""
    missing = _missing(conn)
    if not missing:
        return ()
    if not allowed:
        raise SchemaBehind(schema.behind(missing))
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(schema.SCHEMA_MIGRATIONS["sqlite"])
        missing = _missing(conn)  # another process may have applied them meanwhile
        for migration in missing:
            for statement in migration.statements():
                conn.execute(statement)
            conn.execute(schema.RECORD, (migration.version, migration.name))
        conn.execute("COMMIT")
        return tuple(m.name for m in missing)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
