"""The deliverer: a background job that turns action events and notices into notifications and
delivers them, at least once, from the store.

Each pass (`[gateway] notify_interval`):
1. writes the notices this process queued (limit denials, breaker openings, forgeries) into the
   outbox, one row per sink that wants them — off the RPC path: posting only queues;
2. takes (or renews) the deliverer's lease in the store: one replica stages and delivers;
3. stages: for each tenant whose chain head is past its cursor, reads the events after it, makes
   the notifications the sinks want and, in one transaction, inserts them and moves the cursor;
4. delivers what is due, each sink in its own task (one down sink does not hold the others up),
   in order within a sink; a failure is retried after `backoff` doubling to `backoff_max`, and
   after `max_attempts` the row is kept as failed (`effectgate notify retry`).
A crash before a row's removal delivers it again after the restart: receivers dedup on its id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from effectgate.gateway.background.notify import message
from effectgate.gateway.background.notify.sinks import DeliveryFailed, Sink
from effectgate.gateway.background.runner import Job
from effectgate.gateway.core import Clock, EffectProtocol, failpoints
from effectgate.gateway.model import ActionRecord, EventRowBroken, Notice, Outgoing, TrailEvent, notify
from effectgate.gateway.observability import notify_metrics
from effectgate.gateway.store import Store, StoredRow

log = logging.getLogger("effectgate.notify")
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
PAGE = 200
QUEUE = 10_000  # notices waiting for the next pass; beyond it they are dropped (and counted)


class Deliverer:
    def __init__(
        self,
        store: Store,
        protocol: EffectProtocol,
        sinks: Mapping[str, Sink],
        clock: Clock,
        *,
        owner: str,
        interval: float,
    ) -> None:
        self.store = store
        self.protocol = protocol
        self.sinks = dict(sinks)
        self.clock = clock
        self.owner = owner
        self.interval = interval
        # Long enough to outlive a slow pass; a replica that dies leaves it to the next after it.
        self.lease_ttl = min(max(10 * interval, 2.0), 60.0)
        self._queue: list[tuple[Notice, str]] = []
        self._retired: list[Sink] = []  # replaced by a reload, closed at the next pass

    def job(self) -> Job:
        return Job("notify", self.run_pass, self.interval, on_error=_failed, close=self.close)

    def replace_sinks(self, sinks: Mapping[str, Sink]) -> None:
        """SIGHUP: the new sinks serve from the next pass on; the old ones are closed then (a
        pass in progress may still be using them)."""
        self._retired.extend(self.sinks.values())
        self.sinks = dict(sinks)

    # -- notices, posted by the protocol's hooks and the webhook listener ---------------------------

    def post(self, notice: Notice, only: str = "") -> None:
        """Queues a notice for the next pass (never blocks, never touches the store); `only`:
        for that sink alone."""
        if len(self._queue) >= QUEUE:
            notify_metrics.dropped(notice.kind)
            return
        self._queue.append((notice, only))

    async def _write_notices(self) -> None:
        queued, self._queue = self._queue, []
        rows: list[Outgoing] = []
        try:
            for notice, only in queued:
                wanting = [
                    s
                    for s in self.sinks.values()
                    if s.config.wants(notice.kind, notice.tool, notice.tenant) and only in ("", s.name)
                ]
                if not wanting:
                    continue
                record = notice.record
                if record is None and notice.action_id:
                    record = await self.store.get(notice.action_id)
                note = message.of_notice(self.protocol, notice, record)
                rows.extend(self._rows(wanting, note, notice.tenant, notice.kind, notice.at))
            await self.store.notify_post(rows)
        except BaseException:
            self._queue[:0] = queued[: QUEUE - len(self._queue)]  # tried again next pass
            raise

    # -- the pass ---------------------------------------------------------------------------------

    async def run_pass(self) -> None:
        retired, self._retired = self._retired, []
        for sink in retired:
            await sink.close()
        if self._queue:
            await self._write_notices()
        if not await self.store.notify_lease(self.owner, self.clock(), self.lease_ttl):
            return
        await self._stage()
        await self._deliver()
        await self._gauges()

    async def close(self) -> None:
        try:
            if self._queue:
                await self._write_notices()
            await self.store.notify_release(self.owner)
        except Exception as exc:  # the store may be gone at shutdown: the lease then lapses
            log.warning("notify: could not hand the lease back: %s", exc)
        for sink in [*self._retired, *self.sinks.values()]:
            await sink.close()

    async def _stage(self) -> None:
        cursors = await self.store.notify_cursors()
        for ends in await self.store.chain_ends():
            after = cursors.get(ends.tenant, 0)
            while after < ends.head_n:
                stored = await self.store.stored_chain_rows(ends.tenant, after, PAGE)
                positions = [n for n in (_position(row) for row in stored) if n is not None and n > after]
                if not positions:
                    break  # nothing left with a position (a row edited past reading): the head waits
                first = positions[0]
                if first != after + 1:  # retention pruned events this deliverer never read
                    pruned = "notify: events %d..%d of tenant %s were pruned unread"
                    log.warning(pruned, after + 1, first - 1, ends.tenant)
                rows: list[Outgoing] = []
                for row in stored:
                    trail = _readable(row)
                    if trail is not None:
                        rows.extend(await self._of_event(trail))
                if not await self.store.notify_stage(ends.tenant, after, max(positions), rows):
                    return  # another deliverer moved it: the lease changed hands
                after = max(positions)

    async def _of_event(self, trail: TrailEvent) -> list[Outgoing]:
        kind = message.kind_of(trail.event)
        if not kind:
            return []
        wanting = [s for s in self.sinks.values() if s.config.wants(kind, trail.tool, trail.tenant)]
        if not wanting:
            return []
        if (
            kind == notify.UNKNOWN_PARKED
            and trail.event.kind == "observed"
            and message.parked_again(trail.event, await self.store.history(trail.event.action_id))
        ):
            return []  # a re-check of an action parked already
        record: ActionRecord | None = await self.store.get(trail.event.action_id)
        note = message.of_event(self.protocol, trail, kind, record)
        return self._rows(wanting, note, trail.tenant, kind, trail.event.at)

    def _rows(self, sinks: list[Sink], note: dict[str, Any], tenant: str, kind: str, at: float) -> list[Outgoing]:
        now = self.clock()
        event_id = str(note["data"]["event_id"])
        return [
            Outgoing(
                s.name, event_id, tenant, kind, at, _dumps(message.for_sink(note, s.config.console_url)), next_at=now
            )
            for s in sinks
        ]

    async def _deliver(self) -> None:
        due = await self.store.notify_due(self.clock(), PAGE)
        by_sink: dict[str, list[Outgoing]] = defaultdict(list)
        for row in due:
            by_sink[row.sink].append(row)
        await asyncio.gather(
            *(self._deliver_to(name, sorted(rows, key=lambda r: r.created_at)) for name, rows in by_sink.items())
        )

    async def _deliver_to(self, name: str, rows: list[Outgoing]) -> None:
        sink = self.sinks.get(name)
        for row in rows:
            if sink is None:
                await self.store.notify_retry(replace(row, failed=True, last_error=f"no [[notify]] named {name!r} now"))
                notify_metrics.delivery(name, "failed")
                continue
            failpoints.hit("before_notify")
            try:
                await sink.send(row.event_id, json.loads(row.body), row.body)
            except DeliveryFailed as exc:
                await self._failed(sink, row, str(exc))
                return  # the sink is down: its other rows wait for the next pass
            except Exception as exc:  # a sink's own bug: the row is retried like any failure
                log.exception("notify: sink %s raised", name)
                await self._failed(sink, row, type(exc).__name__)
                return
            failpoints.hit("after_notify")
            await self.store.notify_done(row.sink, row.event_id)
            notify_metrics.delivery(name, "delivered")
            notify_metrics.latency(name, max(self.clock() - row.created_at, 0.0))

    async def _failed(self, sink: Sink, row: Outgoing, error: str) -> None:
        c = sink.config
        attempts = row.attempts + 1
        failed = attempts >= c.max_attempts
        pause = min(c.backoff * 2 ** (attempts - 1), c.backoff_max)
        await self.store.notify_retry(
            replace(row, attempts=attempts, next_at=self.clock() + pause, last_error=error, failed=failed)
        )
        notify_metrics.delivery(sink.name, "failed" if failed else "retry")
        level = logging.ERROR if failed else logging.WARNING
        log.log(level, "notify: %s to %s: %s (attempt %d of %d)%s", row.event_id, sink.name, error, attempts,
                c.max_attempts, "; kept as failed: effectgate notify retry" if failed else "")  # fmt: skip

    async def _gauges(self) -> None:
        counts: dict[tuple[str, str], int] = {(name, s): 0 for name in self.sinks for s in ("pending", "failed")}
        for sink, failed, n in await self.store.notify_counts():
            counts[(sink, "failed" if failed else "pending")] = n
        notify_metrics.outbox_read(counts)


def _position(row: StoredRow) -> int | None:
    n = row.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _readable(row: StoredRow) -> TrailEvent | None:
    """The row's event, or None for a row that does not decode (edited by hand, damaged): it is
    skipped with a log line and a metric, and the rows after it are delivered; `effectgate audit
    verify` names it. One bad row never stops every tenant's notifications."""
    try:
        return row.checked()
    except EventRowBroken as exc:
        log.error("notify: skipped an event row that cannot be read: %s", exc.message)
        notify_metrics.broken_row(exc.column)
        return None


def _failed(exc: Exception) -> None:
    log.warning("notify pass failed (retried next pass): %s: %s", type(exc).__name__, exc)
