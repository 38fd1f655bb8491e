"""What people read to decide: an action's payload (masked), and the live inbox (the watch).

The watch polls the store for one tenant's actions in the order they last changed
(`Store.changes`, a cursor over (updated_at, action_id)), so it works across replicas on one
PostgreSQL (or SQLite file) with nothing but reads: a change made by any replica is seen at the
next poll. Why polling and not LISTEN/NOTIFY: it needs no session state (the store works behind
transaction-mode poolers), works on both stores, and a missed notification cannot lose a change;
its cost is one indexed read per watcher per `POLL` seconds.

A change is timestamped before it commits, so a commit may land behind the cursor: each poll
re-reads the last `LOOKBACK` seconds and skips what it already sent (a bounded set of
(action, updated_at) keys, at most `MAX_SEEN`), so a late commit is still delivered, once. Memory
per watcher is that set and one page of records. Delivery is at least once across a resume (a
client dedups by action id and updated_at); within one watch, once.

A new watch (no cursor) starts at its replica's "now", but another replica stamps by its own
reading of the store's clock, which may be behind by up to a probe's round trip (`StoreClock`), and
a change stamped just before "now" may not have committed yet. So `start()` reads what is already
stored within the lookback and keeps it as seen, not sent: that is the past; whatever commits
after it is delivered, even if stamped a little before the watch began. (Before, such a change
was below the new watch's floor and never delivered: a watch on one PostgreSQL replica missed an
action made on another under load.) A watch resumed from a cursor cannot tell what the last watch
sent, so it sends the lookback before its cursor again, all but the cursor's own change.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from google.protobuf.json_format import MessageToDict

from effectgate.gateway.core.protocol.verbs import EffectProtocol
from effectgate.gateway.model import ActionRecord, Change, InvalidRequest, ListQuery
from effectgate.gateway.store import decode_cursor, encode_cursor

POLL = 0.25
LOOKBACK = 5.0
PAGE = 200
MAX_SEEN = 10_000
MASK = "***"


def masked_payload(protocol: EffectProtocol, record: ActionRecord) -> dict[str, Any]:
    """The action's payload as JSON-like values, the tool's sensitive fields masked (top-level
    field names, as in the tool's message). A tool since removed from the config: nothing."""
    try:
        tool = protocol.tool(record.tool)
    except InvalidRequest:
        return {}
    decoded = MessageToDict(tool.load(record.payload), preserving_proto_field_name=True)
    for name in tool.sensitive:
        if name in decoded:
            decoded[name] = MASK
    return decoded


class Watch:
    """One watcher's feed: `start()` names the cursor it starts at, then `changes()` yields."""

    def __init__(self, protocol: EffectProtocol, query: ListQuery, cursor: str, *, poll: float = POLL) -> None:
        self.protocol = protocol
        self.query = replace(query, page_size=PAGE, after="")
        self.poll = poll
        self._cursor = cursor
        # Never deliver at or before this position (the resume point); the last delivered one.
        self._floor: tuple[float, str] = (0.0, "")
        self._position: tuple[float, str] = (0.0, "")
        self._seen: dict[tuple[str, float], None] = {}

    async def start(self, *, past: bool = True) -> str:
        """The cursor the watch starts at. A new watch keeps what is stored already as the past
        (`past`, the module's docstring); `past=False` reads nothing and delivers the last
        `LOOKBACK` seconds too (the waits' feed: its changes are hints, each wait reads its
        action again)."""
        if self._cursor:
            try:
                at, action_id = decode_cursor(self._cursor)
            except ValueError:
                raise InvalidRequest([("cursor", "not a cursor this gateway issued")]) from None
            # The same blind spot as a new watch's: a change stamped a little before the cursor
            # may have committed after the last watch read. The lookback before it is read again
            # and delivered (a client drops what it has: at least once across a resume), all but
            # the cursor's own change.
            self._floor, self._position = (at - LOOKBACK, ""), (at, action_id)
            self._seen[(action_id, at)] = None
            return self._cursor
        now = self.protocol.now()
        self._floor, self._position = (now - LOOKBACK, ""), (now, "")
        if past:
            await self._poll()  # what is stored already is the past: seen, not sent
        return encode_cursor(now, "")

    async def changes(self) -> AsyncGenerator[Change, None]:
        while True:
            for change in await self._poll():
                yield change
            await asyncio.sleep(self.poll)

    async def _poll(self) -> list[Change]:
        since = self._position[0] - LOOKBACK
        after = self._floor if since <= self._floor[0] else (since, "")
        found: list[Change] = []
        while True:
            page = await self.protocol.changes(replace(self.query, after=encode_cursor(*after)))
            for record in page:
                key = (record.action_id, record.updated_at)
                if key in self._seen:
                    continue
                self._seen[key] = None
                position = (record.updated_at, record.action_id)
                self._position = max(self._position, position)
                found.append(Change(record, encode_cursor(*position)))
            if len(page) < PAGE:
                break
            after = (page[-1].updated_at, page[-1].action_id)
        self._forget()
        return found

    def _forget(self) -> None:
        """Keeps the keys the next poll may meet again (inside the lookback), at most MAX_SEEN."""
        horizon = self._position[0] - LOOKBACK
        for key in [k for k in self._seen if k[1] < horizon]:
            del self._seen[key]
        while len(self._seen) > MAX_SEEN:  # a burst: the oldest go (a late duplicate, never a loss)
            del self._seen[next(iter(self._seen))]
