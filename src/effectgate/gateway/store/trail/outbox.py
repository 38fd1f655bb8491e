"""The notifications' outbox (migration 0010, docs/notifications.md), once for every SQL backend.

Action events need no outbox write of their own: `action_events` is written in the transaction of
every change, and within a tenant its chain position `n` commits in order and without gaps (the
tenant's head row serialises the writers, trail/chain.py). So the deliverer keeps a cursor on `n`
per tenant and, in one transaction, advances it and inserts the notifications it made of the rows
it read (`notify_stage`): a crash before that commit reads the same rows again, after it finds
them in the outbox. Notices (facts with no action event) are inserted straight into the outbox.
Every insert is `ON CONFLICT DO NOTHING` on (sink, event_id): the same event staged twice is one
row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from effectgate.gateway.model import Outgoing
from effectgate.gateway.store.sql_primitives import Script, SqlHooks

_COLUMNS = "sink, event_id, tenant, kind, created_at, body, attempts, next_at, last_error, failed"
_LEASE = "deliverer"


class NotifyOutbox:
    """The store's port for notifications. A store without it raises NotImplementedError."""

    async def notify_start(self) -> None:
        """Notifications begin: the first time ever, sets every tenant's cursor at its chain's head
        (history is not replayed); later, nothing. Called before the gateway serves, so that no
        event written after the start is taken for history (the first pass may come later)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_lease(self, owner: str, now: float, ttl: float) -> bool:
        """Takes or renews the deliverer's lease (one replica delivers); True while `owner`
        holds it. The first time ever (no `notify_start` before it), sets every tenant's cursor
        at its chain's head."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_release(self, owner: str) -> None:
        """Gives the lease up (a graceful stop), so that the next replica takes it at once."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_cursors(self) -> dict[str, int]:
        """Each tenant's cursor: the chain position read up to (a tenant absent: 0)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_stage(self, tenant: str, after_n: int, to_n: int, rows: Sequence[Outgoing]) -> bool:
        """Moves `tenant`'s cursor from `after_n` to `to_n` and inserts `rows`, in one transaction;
        False (nothing written) when the cursor is no longer at `after_n`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_post(self, rows: Sequence[Outgoing]) -> None:
        """Inserts notifications of notices (a row already there stays as it is)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_due(self, now: float, limit: int) -> list[Outgoing]:
        """Up to `limit` rows not failed whose next attempt is due, oldest first."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_done(self, sink: str, event_id: str) -> None:
        """The sink took it: the row leaves the outbox."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_retry(self, row: Outgoing) -> None:
        """Writes the row's attempts, next attempt, last error and `failed`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_rows(self, failed: bool | None, limit: int) -> list[Outgoing]:
        """The outbox, oldest first: pending rows (`failed` False), failed ones (True) or both."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_requeue(self, now: float, sink: str = "", event_id: str = "") -> int:
        """Failed rows (of `sink`, or with `event_id`, when given) become due again with their
        attempts reset; how many."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")

    async def notify_counts(self) -> list[tuple[str, bool, int]]:
        """(sink, failed, rows) of the outbox."""
        raise NotImplementedError(f"{type(self).__name__} keeps no notifications")


def _values(row: Outgoing) -> tuple[Any, ...]:
    return (
        row.sink,
        row.event_id,
        row.tenant,
        row.kind,
        row.created_at,
        row.body,
        row.attempts,
        row.next_at,
        row.last_error,
        int(row.failed),
    )


def _row(found: Sequence[Any]) -> Outgoing:
    sink, event_id, tenant, kind, created, body, attempts, next_at, error, failed = found
    return Outgoing(
        str(sink), str(event_id), str(tenant), str(kind), float(created), str(body),
        int(attempts), float(next_at), str(error), bool(failed),
    )  # fmt: skip


class _Statements:
    def __init__(self, render: Callable[[str], str]) -> None:
        self.marked = render(f"SELECT owner FROM notify_state WHERE name = '{_LEASE}'")
        # The start's mark: a free lease (no owner, expired), inserted once; the replica whose
        # insert wins takes the snapshot (a concurrent one waits on the key, then inserts nothing).
        self.mark = render(
            f"INSERT INTO notify_state (name, owner, expires_at) VALUES ('{_LEASE}', '', 0)"
            " ON CONFLICT (name) DO NOTHING RETURNING owner"
        )
        # SQLite needs the WHERE to read ON CONFLICT as the upsert's, not as a join's.
        self.snapshot = render(
            "INSERT INTO notify_cursors (tenant, n) SELECT tenant, n FROM event_heads WHERE true"
            " ON CONFLICT (tenant) DO NOTHING"
        )
        # Parameters: owner, expiry, now.
        self.lease = render(
            f"INSERT INTO notify_state (name, owner, expires_at) VALUES ('{_LEASE}', ?, ?) ON CONFLICT (name)"
            " DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at"
            " WHERE notify_state.owner = excluded.owner OR notify_state.expires_at <= ? RETURNING owner"
        )
        self.release = render(f"UPDATE notify_state SET expires_at = 0 WHERE name = '{_LEASE}' AND owner = ?")
        self.cursors = render("SELECT tenant, n FROM notify_cursors")
        self.seed = render("INSERT INTO notify_cursors (tenant, n) VALUES (?, 0) ON CONFLICT (tenant) DO NOTHING")
        # Parameters: to, tenant, from.
        self.advance = render("UPDATE notify_cursors SET n = ? WHERE tenant = ? AND n = ? RETURNING n")
        self.post = render(
            f"INSERT INTO notify_outbox ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (sink, event_id) DO NOTHING"
        )
        self.due = render(
            f"SELECT {_COLUMNS} FROM notify_outbox WHERE failed = 0 AND next_at <= ?"
            " ORDER BY next_at, created_at LIMIT ?"
        )
        self.done = render("DELETE FROM notify_outbox WHERE sink = ? AND event_id = ?")
        self.retry = render(
            "UPDATE notify_outbox SET attempts = ?, next_at = ?, last_error = ?, failed = ?"
            " WHERE sink = ? AND event_id = ?"
        )
        self.counts = render("SELECT sink, failed, count(*) FROM notify_outbox GROUP BY sink, failed")
        self.render = render


class SqlNotifyOutbox(NotifyOutbox, SqlHooks):
    """`NotifyOutbox` on the SQL core's hooks (mixed into `SqlStore`)."""

    _notify: _Statements | None = None

    @property
    def _nq(self) -> _Statements:
        if self._notify is None:
            self._notify = _Statements(self._render)
        return self._notify

    def _start(self) -> Script:
        if (yield self._nq.mark, ()):
            yield self._nq.snapshot, ()  # notifications start now: no history is replayed
        return True

    async def notify_start(self) -> None:
        await self._transact(self._start())

    def _lease(self, owner: str, now: float, ttl: float) -> Script:
        q = self._nq
        if not (yield q.marked, ()):
            yield q.snapshot, ()  # notifications start now: no history is replayed
        return bool((yield q.lease, (owner, now + ttl, now)))

    async def notify_lease(self, owner: str, now: float, ttl: float) -> bool:
        return bool(await self._transact(self._lease(owner, now, ttl)))

    async def notify_release(self, owner: str) -> None:
        await self._write_count(self._nq.release, (owner,))

    async def notify_cursors(self) -> dict[str, int]:
        return {str(t): int(n) for t, n in await self._read(self._nq.cursors, ())}

    def _stage(self, tenant: str, after_n: int, to_n: int, rows: Sequence[Outgoing]) -> Script:
        q = self._nq
        yield q.seed, (tenant,)
        if not (yield q.advance, (to_n, tenant, after_n)):
            return False
        for row in rows:
            yield q.post, _values(row)
        return True

    async def notify_stage(self, tenant: str, after_n: int, to_n: int, rows: Sequence[Outgoing]) -> bool:
        return bool(await self._transact(self._stage(tenant, after_n, to_n, rows)))

    def _post(self, rows: Sequence[Outgoing]) -> Script:
        for row in rows:
            yield self._nq.post, _values(row)

    async def notify_post(self, rows: Sequence[Outgoing]) -> None:
        if rows:
            await self._transact(self._post(rows))

    async def notify_due(self, now: float, limit: int) -> list[Outgoing]:
        return [_row(r) for r in await self._read(self._nq.due, (now, limit))]

    async def notify_done(self, sink: str, event_id: str) -> None:
        await self._write_count(self._nq.done, (sink, event_id))

    async def notify_retry(self, row: Outgoing) -> None:
        params = (row.attempts, row.next_at, row.last_error, int(row.failed), row.sink, row.event_id)
        await self._write_count(self._nq.retry, params)

    async def notify_rows(self, failed: bool | None, limit: int) -> list[Outgoing]:
        where, params = ("", [limit]) if failed is None else (" WHERE failed = ?", [int(failed), limit])
        sql = self._nq.render(f"SELECT {_COLUMNS} FROM notify_outbox{where} ORDER BY created_at, event_id LIMIT ?")
        return [_row(r) for r in await self._read(sql, params)]

    async def notify_requeue(self, now: float, sink: str = "", event_id: str = "") -> int:
        where: list[str] = ["failed = 1"]
        params: list[Any] = [now]
        for column, value in (("sink", sink), ("event_id", event_id)):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"UPDATE notify_outbox SET failed = 0, attempts = 0, next_at = ? WHERE {' AND '.join(where)}"
        return await self._write_count(self._nq.render(sql), params)

    async def notify_counts(self) -> list[tuple[str, bool, int]]:
        return [(str(s), bool(f), int(c)) for s, f, c in await self._read(self._nq.counts, ())]
