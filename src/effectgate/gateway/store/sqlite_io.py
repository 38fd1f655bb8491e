"""SQLite I/O off the event loop: one writer thread with group commit, and a pool of readers.

The writer owns the only write connection. It takes every transaction queued while the previous
commit was running and commits them together: one `BEGIN IMMEDIATE`, one SAVEPOINT per
transaction (a failing one is rolled back alone; a single statement needs none, SQLite undoes a
failed statement by itself), one `COMMIT` (one fsync under `synchronous=FULL`). A caller is
answered only after the commit that holds its transaction, so an answer still means "durable".
If the batch cannot begin or commit, or SQLite rolls the whole transaction back, every caller in
it fails: no success is ever reported for a rolled-back write.

A transaction that only runs statements (`rerunnable`: no effect outside the connection, so it can
run again) skips its savepoint while every transaction of the batch is rerunnable or a single
statement: the hot writes (an action's change and its story row) then cost two statements, not
four. If one of them fails, the whole batch is rolled back and run again with a savepoint each,
so the failing one is still undone alone and the others commit as before.

Each transaction is one function run in the writer thread: one thread hop per transaction (and
one hop back per batch). Readers run on their own connections in a small thread pool; in WAL mode
they never wait for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from effectgate.gateway.store.faults import StoreError, StoreUnavailable, sqlite_error

T = TypeVar("T")
Connect = Callable[[], sqlite3.Connection]
# How a transaction is kept apart from the others of its commit (see the module's docstring).
STATEMENT, RERUNNABLE, SAVEPOINT = 0, 1, 2
# (function, its future, the caller's loop, its isolation: STATEMENT, RERUNNABLE or SAVEPOINT)
_Job = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop, int]
_Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]
_STOP = object()


def unavailable(what: str, exc: sqlite3.Error) -> StoreUnavailable:
    error = StoreUnavailable(f"SQLite {what}: {exc}")
    error.__cause__ = exc
    return error


def _write_error(exc: Exception) -> BaseException:
    """A statement's failure named by what it is (store/faults.py); busy past the timeout means
    the write never started (another process holds the lock). Anything else (a limit's refusal
    raised by a script) is the caller's own."""
    if not isinstance(exc, sqlite3.Error | OverflowError):
        return exc
    busy = getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return sqlite_error("store cannot start a write" if busy else "write failed", exc)


def read_error(exc: sqlite3.Error | OverflowError) -> StoreError:
    return sqlite_error("read failed", exc)


class Writer:
    """Runs write transactions in one thread, many per commit."""

    def __init__(self, conn: sqlite3.Connection, max_batch: int = 512) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="effectgate-sqlite-writer", daemon=True)
        self._thread.start()
        self.batches = 0  # commits made (observability and tests)
        self.transactions = 0

    async def transaction(
        self, fn: Callable[[sqlite3.Connection], T], *, single_statement: bool = False, rerunnable: bool = False
    ) -> T:
        """Runs `fn(conn)` inside a write transaction; returns its result once committed.

        `single_statement`: `fn` runs exactly one statement. SQLite undoes a failed statement on
        its own (statement journal) and keeps the transaction, so no SAVEPOINT is needed: that
        saves two statements, and two GIL hand-offs, per transaction. `rerunnable`: `fn` only
        runs statements on the connection, so the writer may run it again (the module's docstring)."""
        if self._closed:
            raise StoreUnavailable("store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, future, loop, STATEMENT if single_statement else RERUNNABLE if rerunnable else SAVEPOINT))
        return await future

    async def close(self) -> None:
        """Finishes the queued transactions, then stops the thread and closes the connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch: list[_Job] = [first]  # type: ignore[list-item]
                stop = False
                while len(batch) < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)  # type: ignore[arg-type]
                try:
                    self._commit(batch)
                except Exception as exc:  # a bug here must not leave callers waiting forever
                    self._abort(batch, StoreUnavailable(f"SQLite writer failed: {type(exc).__name__}"))
                if stop:
                    return
        finally:
            self._conn.close()

    def _commit(self, batch: list[_Job], *, isolated: bool = False) -> None:
        """`isolated`: every transaction that may fail after a change gets its savepoint (the
        second run of a batch whose rerunnable transaction failed)."""
        if len(batch) == 1 and batch[0][3] == STATEMENT:
            self._autocommit(batch[0])
            return
        conn = self._conn
        single = len(batch) == 1
        # Rerunnable transactions go without savepoints when the whole batch can run again.
        lean = not single and not isolated and all(job[3] != SAVEPOINT for job in batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._deliver(batch, [(job[1], None, unavailable("store cannot start a write", exc)) for job in batch])
            return
        outcomes: list[_Outcome] = []
        for fn, future, _, isolation in batch:
            savepoint = not single and isolation != STATEMENT and not (lean and isolation == RERUNNABLE)
            try:
                if savepoint:
                    conn.execute("SAVEPOINT tx")
                result = fn(conn)
                if savepoint:
                    conn.execute("RELEASE tx")
                outcomes.append((future, result, None))
            except Exception as exc:
                error = _write_error(exc)
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back (I/O error, disk full, ...):
                    # every write of this batch is lost, so every caller fails.
                    self._deliver(batch, [(job[1], None, error) for job in batch])
                    return
                if lean and isolation == RERUNNABLE:
                    # Its statements before the failure cannot be undone alone: the batch is
                    # rolled back and runs again, each transaction in a savepoint of its own.
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error as undo:
                        self._abort(batch, unavailable("write failed", undo))
                        return
                    self._commit(batch, isolated=True)
                    return
                try:
                    if single:
                        conn.execute("ROLLBACK")
                    elif savepoint:
                        conn.execute("ROLLBACK TO tx")
                        conn.execute("RELEASE tx")
                except sqlite3.Error as undo:
                    self._abort(batch, unavailable("write failed", undo))
                    return
                outcomes.append((future, None, error))
        if single and outcomes[0][2] is not None:
            self._deliver(batch, outcomes)  # already rolled back
            return
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._abort(batch, unavailable("commit failed", exc))
            return
        self.batches += 1
        self.transactions += len(batch)
        self._deliver(batch, outcomes)

    def _autocommit(self, job: _Job) -> None:
        """A lone single-statement transaction (what an idle gateway mostly writes) runs as one
        autocommit statement: SQLite wraps it in its own transaction, commits it (one fsync under
        FULL) or rolls it back whole, and BEGIN/COMMIT would only add two round trips."""
        fn, future = job[0], job[1]
        try:
            outcome: _Outcome = (future, fn(self._conn), None)
        except Exception as exc:
            if self._conn.in_transaction:  # a failure inside fn after its statement: undo it all
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
            outcome = (future, None, _write_error(exc))
        else:
            self.batches += 1
            self.transactions += 1
        self._deliver([job], [outcome])

    def _abort(self, batch: list[_Job], error: StoreUnavailable) -> None:
        if self._conn.in_transaction:
            # If even this fails, SQLite rolls back when it can: nothing was committed.
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
        self._deliver(batch, [(job[1], None, error) for job in batch])

    @staticmethod
    def _deliver(batch: list[_Job], outcomes: list[_Outcome]) -> None:
        # One wake-up per event loop for the whole batch.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for (_, _, loop, _), outcome in zip(batch, outcomes, strict=True):
            by_loop.setdefault(loop, []).append(outcome)
        for loop, results in by_loop.items():
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, results)


def _resolve(outcomes: list[_Outcome]) -> None:
    for future, result, error in outcomes:
        if future.done():  # the caller was cancelled; the write stands or not as reported above
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class Readers:
    """Read-only connections, one per pool thread, opened on first use."""

    def __init__(self, connect: Connect, size: int = 2) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="effectgate-sqlite-reader")
        self._closed = False

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailable("store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._pool, lambda: fn(self._conn()))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._pool.shutdown, wait=True)
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
