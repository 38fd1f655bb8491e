"""A bounded per-process cache of settled records, so a replay is answered with no I/O.

Only CONFIRMED and REJECTED records without a bypass grant are kept: nothing changes them except
a bypass (grant, then use), and both go through this process's protocol verbs, which drop the
entry. Another replica can grant and use a bypass behind this cache's back; an entry therefore
lives `ttl` seconds from the moment it was read from the store (a hit does not extend it), which
bounds how long a replay here may still show the previous generation's outcome (never a second
effect: an Execute with `bypass` always reads the store).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from effectgate.gateway.core.ttl_cache import TtlCache
from effectgate.gateway.model.domain import ActionRecord

CAPACITY = 10_000
TTL = 10.0


def cacheable(record: ActionRecord) -> bool:
    return record.state.terminal and not record.bypass_granted


class SettledCache:
    def __init__(self, capacity: int = CAPACITY, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: TtlCache[str, ActionRecord] = TtlCache(capacity, ttl, clock)

    @property
    def ttl(self) -> float:
        return self._entries.ttl

    @property
    def capacity(self) -> int:
        return self._entries.capacity

    def get(self, action_id: str) -> ActionRecord | None:
        return self._entries.get(action_id)

    def put(self, record: ActionRecord) -> None:
        """Keeps a record just read from the store or just settled by this process; the record
        the cache already holds keeps its original expiry."""
        if cacheable(record) and self._entries.get(record.action_id) is not record:
            self._entries.put(record.action_id, record)

    def drop(self, action_id: str) -> None:
        self._entries.drop(action_id)

    def __len__(self) -> int:
        return len(self._entries)


# (tenant, run_id, step_id, tool, scope, payload type URL, payload bytes): all an Execute carries
# that decides its answer once the action is settled.
RequestKey = tuple[str, str, str, str, str, str, bytes]


class KnownRequests:
    """Requests already answered with an action, by their exact content: a replay of the same
    bytes skips parsing, normalising and fingerprinting its payload and deriving the action id.

    What it maps never goes stale (the action id is a function of the identity, and a payload
    once checked against the action's fingerprint stays checked); it only saves work when the
    settled cache still holds the action, so it shares that cache's bounds."""

    def __init__(self, capacity: int = CAPACITY, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: TtlCache[RequestKey, str] = TtlCache(capacity, ttl, clock)

    def get(self, key: RequestKey) -> str | None:
        return self._entries.get(key)

    def put(self, key: RequestKey, action_id: str) -> None:
        self._entries.put(key, action_id)
