"""SQLite-only store behaviour: group commit, per-transaction savepoints, failure of a whole
batch, private files, and query plans that stay on indexes."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from effectgate.gateway.model.domain import ListQuery, State
from effectgate.gateway.store import StoreDataRefused, StoreUnavailable
from effectgate.gateway.store.action_events import StorySql
from effectgate.gateway.store.sql import Statements
from effectgate.gateway.store.sql_primitives import SQLITE
from effectgate.gateway.store.sqlite import SqliteStore
from effectgate.gateway.store.sqlite_io import Writer
from tests.store_backends import record

NOW = 10_000.0


def raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


async def hold(writer: Writer) -> tuple[asyncio.Future[bool], threading.Event]:
    """Keeps the writer busy in a transaction of its own until the event is set."""
    started, release = threading.Event(), threading.Event()

    def busy(conn: sqlite3.Connection) -> bool:
        started.set()
        return release.wait(30)

    holder = asyncio.ensure_future(writer.transaction(busy))
    assert await asyncio.to_thread(started.wait, 30)
    return holder, release


async def blocked_batch(writer: Writer, jobs: list) -> list:  # type: ignore[type-arg]
    """Runs `jobs` as one batch: the writer is held busy until all of them are queued."""
    holder, release = await hold(writer)
    pending = [asyncio.ensure_future(writer.transaction(job)) for job in jobs]
    await asyncio.sleep(0.05)  # every task runs up to its queue.put in the next loop turn
    release.set()
    await holder
    return await asyncio.gather(*pending, return_exceptions=True)


async def test_one_commit_for_many_transactions_and_one_failure_rolls_back_alone(tmp_path: Path) -> None:
    conn = raw(tmp_path / "w.db")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES ('taken')")
    writer = Writer(conn)
    try:

        def insert(*keys: str):  # type: ignore[no-untyped-def]
            def job(c: sqlite3.Connection) -> int:
                for key in keys:
                    c.execute("INSERT INTO t VALUES (?)", (key,))
                return len(keys)

            return job

        def boom(c: sqlite3.Connection) -> None:
            c.execute("INSERT INTO t VALUES ('from-boom')")
            raise KeyError("a bug in one transaction")

        results = await blocked_batch(
            writer, [insert("a"), insert("b1", "taken"), insert("c"), boom, insert(*(f"d{i}" for i in range(5)))]
        )
        assert results[0] == 1 and results[2] == 1 and results[4] == 5
        assert isinstance(results[1], StoreDataRefused)  # a constraint: permanent, not an outage
        assert isinstance(results[3], KeyError)
        assert (writer.batches, writer.transactions) == (2, 6)  # the holder, then one commit for five
    finally:
        await writer.close()
    check = sqlite3.connect(tmp_path / "w.db")
    keys = {k for (k,) in check.execute("SELECT k FROM t")}
    # b1 and from-boom were rolled back with their own savepoints; the rest committed together.
    assert keys == {"taken", "a", "c", *(f"d{i}" for i in range(5))}


async def test_rerunnable_transactions_share_a_commit_without_savepoints_and_a_failure_is_undone_alone(
    tmp_path: Path,
) -> None:
    conn = raw(tmp_path / "w.db")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES ('taken')")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    writer = Writer(conn)

    def pair(first: str, second: str) -> Callable[[sqlite3.Connection], int]:
        def job(c: sqlite3.Connection) -> int:
            c.execute("INSERT INTO t VALUES (?)", (first,))
            c.execute("INSERT INTO t VALUES (?)", (second,))
            return 2

        return job

    async def batch(jobs: list[Callable[[sqlite3.Connection], int]]) -> list[int | BaseException]:
        holder, release = await hold(writer)
        pending = [asyncio.ensure_future(writer.transaction(job, rerunnable=True)) for job in jobs]
        await asyncio.sleep(0.05)
        statements.clear()
        release.set()
        await holder
        results = await asyncio.gather(*pending, return_exceptions=True)
        del statements[: statements.index("BEGIN IMMEDIATE")]  # the holder's own COMMIT
        return results

    try:
        assert await batch([pair("a1", "a2"), pair("b1", "b2")]) == [2, 2]
        assert not [s for s in statements if "SAVEPOINT" in s or "RELEASE" in s]
        # The second pair fails after its first insert: the batch runs again, each in a savepoint.
        results = await batch([pair("c1", "c2"), pair("d1", "taken"), pair("e1", "e2")])
        assert results[0] == 2 and results[2] == 2
        assert isinstance(results[1], StoreDataRefused)  # a constraint: permanent, not an outage
        assert statements.count("ROLLBACK") == 1 and statements.count("COMMIT") == 1
        assert statements.count("SAVEPOINT tx") == 3
        assert (writer.batches, writer.transactions) == (4, 7)  # two holders, two batches
    finally:
        await writer.close()
    check = sqlite3.connect(tmp_path / "w.db")
    assert {k for (k,) in check.execute("SELECT k FROM t")} == {"taken", "a1", "a2", "b1", "b2", "c1", "c2", "e1", "e2"}


async def test_a_failing_single_statement_is_undone_alone(tmp_path: Path) -> None:
    conn = raw(tmp_path / "w.db")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    writer = Writer(conn)
    holder, release = await hold(writer)
    try:
        # One multi-row statement that fails half-way: SQLite's statement journal undoes its
        # first row; the statements around it in the same commit stand.
        statements = ["INSERT INTO t VALUES ('a')", "INSERT INTO t VALUES ('b'), ('a')", "INSERT INTO t VALUES ('c')"]

        def run(sql: str) -> Callable[[sqlite3.Connection], int]:
            return lambda c: c.execute(sql).rowcount

        pending = [asyncio.ensure_future(writer.transaction(run(s), single_statement=True)) for s in statements]
        await asyncio.sleep(0.05)
        release.set()
        await holder
        results = await asyncio.gather(*pending, return_exceptions=True)
        assert results[0] == 1 and results[2] == 1 and isinstance(results[1], StoreDataRefused)
        assert (writer.batches, writer.transactions) == (2, 4)
    finally:
        release.set()
        await writer.close()
    check = sqlite3.connect(tmp_path / "w.db")
    assert sorted(k for (k,) in check.execute("SELECT k FROM t")) == ["a", "c"]


async def test_a_batch_whose_commit_fails_fails_every_caller(tmp_path: Path) -> None:
    conn = raw(tmp_path / "w.db")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (k TEXT PRIMARY KEY)")
    conn.execute("CREATE TABLE child (k TEXT REFERENCES parent (k) DEFERRABLE INITIALLY DEFERRED)")
    writer = Writer(conn)
    try:
        jobs = [
            lambda c: c.execute("INSERT INTO parent VALUES ('p1')").rowcount,
            lambda c: c.execute("INSERT INTO child VALUES ('orphan')").rowcount,  # fails only at COMMIT
            lambda c: c.execute("INSERT INTO parent VALUES ('p2')").rowcount,
        ]
        results = await blocked_batch(writer, jobs)
        assert all(isinstance(r, StoreUnavailable) and "commit failed" in str(r) for r in results)
        # The writer carries on with the next batch.
        assert await writer.transaction(lambda c: c.execute("INSERT INTO parent VALUES ('p3')").rowcount) == 1
    finally:
        await writer.close()
    check = sqlite3.connect(tmp_path / "w.db")
    assert check.execute("SELECT k FROM parent").fetchall() == [("p3",)]
    assert check.execute("SELECT count(*) FROM child").fetchone() == (0,)


async def test_concurrent_actions_share_commits(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "eg.db"))
    await store.open()
    assert store._writer is not None
    # Hold the writer so that the 200 inserts are all queued before the next commit.
    holder, release = await hold(store._writer)
    try:
        inserts = asyncio.gather(*(store.insert_if_absent(record(f"a{i:03}")) for i in range(200)))
        await asyncio.sleep(0.1)
        release.set()
        await holder
        assert all(inserted for _, inserted in await inserts)
        assert store.commits == (2, 201)
        assert len((await store.list(ListQuery(tenant="acme", page_size=500))).records) == 200
    finally:
        release.set()
        await store.close()


async def test_reads_go_on_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "eg.db"), busy_timeout_ms=200)
    await store.open()
    await store.insert_if_absent(record("kept"))
    blocker = sqlite3.connect(tmp_path / "eg.db", isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        assert await store.get("kept") == record("kept")
        with pytest.raises(StoreUnavailable, match="cannot start a write"):
            await store.insert_if_absent(record("new"))
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        await store.close()


async def test_new_files_are_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "eg.db"
    store = SqliteStore(str(path))
    await store.open()
    try:
        await store.insert_if_absent(record("a1"))  # the -wal and -shm files exist from here on
        for name in ("eg.db", "eg.db-wal", "eg.db-shm"):
            mode = stat.S_IMODE(os.stat(path.parent / name).st_mode)
            assert mode & 0o077 == 0, f"{name} is {oct(mode)}"
        for directory in (tmp_path / "new", path.parent):
            assert stat.S_IMODE(os.stat(directory).st_mode) & 0o077 == 0, directory
    finally:
        await store.close()


async def test_hot_statements_use_indexes(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "eg.db"))
    await store.open()
    await store.close()
    q = Statements(SQLITE)
    conn = sqlite3.connect(tmp_path / "eg.db")
    cursor = "MTAwMC4wfGEx"  # (1000.0, "a1")
    statements = [
        (q.get, ("a",)),
        (q.acquire, ("o", 1.0, "a", 0.0)),
        (q.update, (*("x",) * 10, "a", 1)),
        (q.claim, (NOW, NOW, 10, "o", 1.0)),
        (q.purge, ("tool", NOW, 10)),
        q.list(ListQuery(tenant="acme"), 50),
        q.list(ListQuery(tenant="acme", after=cursor), 50),
        q.list(ListQuery(tenant="acme", state=State.UNKNOWN, after=cursor), 50),
        q.list(ListQuery(tenant="acme", run_id="r", tool="t"), 50),
        # The approval expiry, the story and the watch (migration 0005).
        (q.doomed, ("tool", NOW, 10)),
        (q.awaiting, ("tool", NOW, 10)),
        (q.history, ("a",)),
        StorySql.changes(ListQuery(tenant="acme", after=cursor), 50),
        StorySql.changes(ListQuery(tenant="acme", state=State.AWAITING_APPROVAL, after=cursor), 50),
    ]
    for sql, params in statements:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        scans = [step for step in plan if step.startswith(("SCAN actions", "SCAN action_events"))]
        assert not scans, (sql, plan)
    conn.close()
