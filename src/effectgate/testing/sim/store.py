"""The real SQL store run synchronously on one in-memory SQLite database, with faults.

`SimDatabase` is the database every simulated replica shares (one connection, the real schema
and migrations); `SimStore` is one replica's connection to it: the production SQLite store's
statements and scripts (`SqliteStore`, `SqlStore`) with the writer thread and the reader pool
replaced by a direct call. Each statement is atomic, as a transaction of the real store is (a
transaction of one statement runs as SQLite's own: in autocommit mode a statement commits or
rolls back whole, without a BEGIN and a COMMIT around it).

`SimDatabase.written()` is a feed of the action rows written since it was last asked (their
state and fence), for a simulator that checks its invariants after every write without reading
the table back: triggers on `actions` hand every row to it as it is written.

Around every statement the store awaits its `StoreHooks`: `enter` before it runs (add latency,
raise `StoreUnavailable` with nothing written, or never return: a crashed process) and `leave`
after it committed (latency on the way back, or raise `StoreUnavailable` although the write is
durable: a commit whose outcome the caller cannot know). `StoreFaults` draws those from a seeded
`random.Random`.

What it cannot show of PostgreSQL (row-lock queueing, `SKIP LOCKED`, the dialect's SQL) stays
with the PostgreSQL tests.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from effectgate.gateway.store import schema
from effectgate.gateway.store.faults import StoreUnavailable
from effectgate.gateway.store.sql_primitives import Row
from effectgate.gateway.store.sqlite import SqliteStore
from effectgate.gateway.store.sqlite_io import _write_error, read_error

T = TypeVar("T")
READ, WRITE = "read", "write"


class StoreHooks(Protocol):
    async def enter(self, kind: str) -> None:
        """Before a statement runs (`kind`: "read" or "write"); raising stops it unwritten."""

    async def leave(self, kind: str) -> None:
        """After it ran (a write: committed); raising hides a durable write from its caller."""


class NoFaults:
    async def enter(self, kind: str) -> None:
        pass

    async def leave(self, kind: str) -> None:
        pass


class SimDatabase:
    """One in-memory SQLite database with the store's schema; `now` is the store's own clock."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._pooled = _Pooled.take(self)
        self.conn = self._pooled.conn
        self.now = now
        self.writes = 0
        # The feed (`written`): action id -> (state, fence), None when deleted; `_doubt` when a
        # statement was rolled back after its triggers ran (then the rows are read back).
        self._written: dict[str, tuple[str, int] | None] = {}
        self._doubt = False

    def _row_written(self, action_id: str, state: str, fence: int) -> None:
        self._written[action_id] = (state, fence)

    def _row_deleted(self, action_id: str) -> None:
        self._written[action_id] = None

    def rolled_back(self) -> None:
        """A write was rolled back: rows its triggers handed to the feed may not be there."""
        self._doubt = True

    def written(self) -> dict[str, tuple[str, int]]:
        """The action rows written since the last call, as they stand now: id -> (state, fence)
        (a row deleted since is left out)."""
        if not self._written:
            return {}
        written, self._written = self._written, {}
        if self._doubt:
            self._doubt = False
            marks = ", ".join("?" * len(written))
            found = self.conn.execute(
                f"SELECT action_id, state, fence FROM actions WHERE action_id IN ({marks})", list(written)
            )
            return {r[0]: (r[1], r[2]) for r in found}
        return {action_id: row for action_id, row in written.items() if row is not None}

    def close(self) -> None:
        """Emptied and handed to the next world; this one's `conn` is closed from now on."""
        self.conn = _CLOSED
        self._pooled.give_back()


_WRITTEN, _DELETED = "sim_action_written", "sim_action_deleted"


@functools.cache
def _migrated() -> sqlite3.Connection:
    """An empty database with every migration applied and the feed's triggers (made once per
    process, then copied: a connection that writes to a copy must define the feed's functions)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    for migration in schema.load("sqlite"):
        for statement in migration.statements():
            conn.execute(statement)
    written = f"{_WRITTEN}(new.action_id, new.state, new.fence)"
    for name, verb, call in (
        ("inserted", "INSERT", written),
        ("updated", "UPDATE", written),
        ("deleted", "DELETE", f"{_DELETED}(old.action_id)"),
    ):
        conn.execute(f"CREATE TRIGGER sim_action_{name} AFTER {verb} ON actions BEGIN SELECT {call}; END")
    return conn


class _Pooled:
    """A copy of the migrated database, used by one world after another: emptied in between, its
    connection keeps its prepared statements (a new connection prepared each of a world's ~40
    statements again, about 1 ms a seed). Emptied is as new: every table is empty in the migrated
    database, rows get the same row ids (`sqlite_sequence` emptied too), and the schema (so every
    query plan) is the same. The feed's functions, defined once (defining one again expires every
    prepared statement), call the world that holds the connection."""

    _idle: list[_Pooled] = []

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        _migrated().backup(self.conn)  # a copy of a migrated database: many times faster than migrating
        self.owner: SimDatabase | None = None
        self.conn.create_function(_WRITTEN, 3, self._row_written)
        self.conn.create_function(_DELETED, 1, self._row_deleted)
        found = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        self.tables = [name for (name,) in found]

    @classmethod
    def take(cls, owner: SimDatabase) -> _Pooled:
        pooled = cls._idle.pop() if cls._idle else cls()
        pooled.owner = owner
        return pooled

    def give_back(self) -> None:
        self.owner = None
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            for table in self.tables:
                self.conn.execute(f'DELETE FROM "{table}"')
        except sqlite3.Error:
            self.conn.close()  # not reused: the next world gets a fresh copy
            return
        self._idle.append(self)

    def _row_written(self, action_id: str, state: str, fence: int) -> None:
        if self.owner is not None:
            self.owner._row_written(action_id, state, fence)

    def _row_deleted(self, action_id: str) -> None:
        if self.owner is not None:
            self.owner._row_deleted(action_id)


# What a closed world's `conn` is: any statement on it raises, as on the connection it had.
_CLOSED = sqlite3.connect(":memory:")
_CLOSED.close()


class SimStore(SqliteStore):
    """One replica's store on a shared `SimDatabase`, with `hooks` around every statement."""

    def __init__(self, db: SimDatabase, hooks: StoreHooks | None = None, *, has_clock: bool = True) -> None:
        # No file, no writer thread: SqliteStore's statements on the shared connection.
        self.path = "sim"
        self.synchronous = "OFF"
        self.busy_timeout_ms = 0
        self._writer = None
        self._readers = None
        self._inline = None
        self.db = db
        self.hooks: StoreHooks = hooks or NoFaults()
        self._open = False
        # A store with a clock of its own (as PostgreSQL): replicas anchor on it (store/clock.py).
        self._has_clock = has_clock

    def redacted_url(self) -> str:
        return "sim://memory"

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def clock(self) -> float | None:
        if not self._has_clock:
            return None
        await self._enter(READ)
        now = self.db.now()
        await self.hooks.leave(READ)
        return now

    async def _enter(self, kind: str) -> sqlite3.Connection:
        if not self._open:
            raise StoreUnavailable("store is not open")
        await self.hooks.enter(kind)
        return self.db.conn

    async def _transaction(
        self, fn: Callable[[sqlite3.Connection], T], *, single_statement: bool = False, rerunnable: bool = False
    ) -> T:
        conn = await self._enter(WRITE)
        if not single_statement:
            conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except Exception as exc:
            if not single_statement:
                conn.execute("ROLLBACK")
            self.db.rolled_back()
            raise _write_error(exc) from exc
        if not single_statement:
            conn.execute("COMMIT")
        self.db.writes += 1
        await self.hooks.leave(WRITE)
        return result

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Row]:
        conn = await self._enter(READ)
        try:
            found = conn.execute(sql, params).fetchall()
        except (sqlite3.Error, OverflowError) as exc:
            raise read_error(exc) from exc
        await self.hooks.leave(READ)
        return found

    async def _read_by_key(self, sql: str, params: Sequence[Any]) -> list[Row]:
        return await self._read(sql, params)


class StoreFaults:
    """Seeded faults for a `SimStore`: each statement may be slow, refused (nothing written) or,
    for a write, committed and then reported failed. `counts` says how many of each happened."""

    def __init__(
        self,
        rng: random.Random,
        sleep: Callable[[float], Any],
        *,
        unavailable: float = 0.02,
        commit_unknown: float = 0.02,
        slow: float = 0.1,
        latency: float = 0.05,
    ) -> None:
        self.rng = rng
        self.sleep = sleep
        self.unavailable = unavailable
        self.commit_unknown = commit_unknown
        self.slow = slow
        self.latency = latency
        self.counts: Counter[str] = Counter()

    async def enter(self, kind: str) -> None:
        if self.rng.random() < self.slow:
            self.counts["store_latency"] += 1
            await self.sleep(self.rng.random() * self.latency)
        if self.rng.random() < self.unavailable:
            self.counts["store_unavailable"] += 1
            raise StoreUnavailable("simulated store outage")

    async def leave(self, kind: str) -> None:
        if kind == WRITE and self.rng.random() < self.commit_unknown:
            self.counts["store_commit_unknown"] += 1
            raise StoreUnavailable("simulated: committed, then the connection dropped")
