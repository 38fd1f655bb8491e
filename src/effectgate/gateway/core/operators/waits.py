"""Calls that wait for an action to change (WaitAction): an agent blocked on an approval waits here
instead of calling Execute again and again.

Every waiting call of one gateway process is fed by one watch per tenant (the change feed of the
live inbox, `Watch`), started when the tenant's first wait arrives and stopped when its last one
leaves: a thousand agents waiting cost one indexed read per tenant per `POLL`, not a thousand, and
a decision made on any replica sharing the store is seen at the next poll. A wait writes nothing;
when it ends (reached, timed out, cancelled by the caller) it leaves no task and no entry behind.

No change is missed between the first read and the feed: a wait registers first, then reads the
action. A change committed before that read is in the read; one committed after it is delivered
by a poll that starts after the registration (and the watch's lookback covers late commits).
The feed starts 5 s back: another replica stamps a change by its own reading of the store's
clock, which may be a little behind this one's, so a change made just after a wait began may be
stamped before its feed did. A change the feed delivers is a hint, not the answer: the wait reads
its action again and answers only what is stored (a hint from before the wait's own read may be
older than it). A wait that runs out answers the action as it reads it then, reached or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from effectgate.gateway.core.operators.inbox import POLL, Watch
from effectgate.gateway.core.protocol.verbs import EffectProtocol
from effectgate.gateway.model import REPORTED, ActionRecord, ListQuery, State

log = logging.getLogger("effectgate.waits")
Until = Callable[[ActionRecord], bool]


def decided(record: ActionRecord) -> bool:
    """No longer waiting for a person: approved (it goes on), denied or expired."""
    return record.state is not State.AWAITING_APPROVAL


def settled(record: ActionRecord) -> bool:
    """The drive stopped with an outcome an Execute would answer: terminal, NOT_FOUND or UNKNOWN."""
    return record.state in REPORTED


class _Released(Exception):
    """The gateway is stopping: the wait answers now with the action as it is."""


@dataclass
class _Waiter:
    until: Until
    answer: asyncio.Future[ActionRecord]


@dataclass
class _Feed:
    """One tenant's watch and the waits it feeds, by action id."""

    task: asyncio.Task[None] | None = None
    waiters: dict[str, list[_Waiter]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(w) for w in self.waiters.values())


class Waits:
    """Every waiting call of this process (see the module's docstring)."""

    def __init__(self, protocol: EffectProtocol, *, poll: float = POLL) -> None:
        self.protocol = protocol
        self.poll = poll
        self._feeds: dict[str, _Feed] = {}
        self._released = False

    @property
    def active(self) -> int:
        """How many calls wait now."""
        return sum(feed.count() for feed in self._feeds.values())

    @property
    def feeds(self) -> int:
        """How many tenants' watches run now (one per tenant with a wait)."""
        return len(self._feeds)

    async def wait(self, tenant: str, action_id: str, until: Until, timeout: float) -> tuple[ActionRecord, bool]:
        """The action once `until` holds for it (True), or as it is when `timeout` seconds have
        passed (False). Raises what `protocol.get` raises (not found, another tenant's, store down)."""
        record = await self.protocol.get(tenant, action_id)
        if until(record) or timeout <= 0 or self._released:
            return record, until(record)
        waiter = _Waiter(until, asyncio.get_running_loop().create_future())
        feed = self._join(tenant, action_id, waiter)
        self.protocol.observer.waits_changed(1)
        try:
            record = await self.protocol.get(tenant, action_id)  # after joining: see the docstring
            if until(record):  # there before the feed could tell
                return record, True
            async with asyncio.timeout(timeout):
                while True:
                    await waiter.answer  # a change for which `until` held (a hint: see the docstring)
                    record = await self.protocol.get(tenant, action_id)
                    if until(record):
                        return record, True
                    waiter.answer = asyncio.get_running_loop().create_future()
        except (TimeoutError, _Released):
            record = await self.protocol.get(tenant, action_id)
            return record, until(record)
        finally:
            self.protocol.observer.waits_changed(-1)
            self._leave(tenant, feed, action_id, waiter)

    def release(self) -> None:
        """Graceful shutdown: every wait answers at once (not reached), so none holds the grace period."""
        self._released = True
        for feed in self._feeds.values():
            for waiting in feed.waiters.values():
                for waiter in waiting:
                    if not waiter.answer.done():
                        waiter.answer.set_exception(_Released())

    def _join(self, tenant: str, action_id: str, waiter: _Waiter) -> _Feed:
        feed = self._feeds.get(tenant)
        if feed is None:
            feed = self._feeds[tenant] = _Feed()
            feed.task = asyncio.create_task(self._run(tenant, feed), name=f"waits:{tenant}")
        feed.waiters.setdefault(action_id, []).append(waiter)
        return feed

    def _leave(self, tenant: str, feed: _Feed, action_id: str, waiter: _Waiter) -> None:
        if waiter.answer.done() and not waiter.answer.cancelled():
            # The feed failed (or the gateway stopped) while this wait was re-reading the action,
            # and the wait ended without awaiting its answer: read the error here, or asyncio
            # logs "Future exception was never retrieved" when the future is collected.
            waiter.answer.exception()
        waiting = feed.waiters.get(action_id, [])
        if waiter in waiting:
            waiting.remove(waiter)
        if not waiting:
            feed.waiters.pop(action_id, None)
        if not feed.waiters and self._feeds.get(tenant) is feed:
            del self._feeds[tenant]
            if feed.task is not None:
                feed.task.cancel()

    async def _run(self, tenant: str, feed: _Feed) -> None:
        watch = Watch(self.protocol, ListQuery(tenant=tenant), "", poll=self.poll)
        try:
            await watch.start(past=False)
            async with contextlib.aclosing(watch.changes()) as changes:
                async for change in changes:
                    for waiter in list(feed.waiters.get(change.record.action_id, ())):
                        if not waiter.answer.done() and waiter.until(change.record):
                            waiter.answer.set_result(change.record)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store is down: every wait of the tenant answers with it
            log.warning("the waits of tenant %s lost their feed: %s", tenant, type(exc).__name__)
            if self._feeds.get(tenant) is feed:
                del self._feeds[tenant]
            for waiting in feed.waiters.values():
                for waiter in waiting:
                    if not waiter.answer.done():
                        waiter.answer.set_exception(exc)
