"""A bounded first-in-first-out cache whose entries live at most `ttl` seconds after they were
stored. Every entry gets the same lifetime, so insertion order is expiry order: expired entries
are purged from the front on every store, and the cache holds at most what the last `ttl`
seconds stored (and never more than `capacity`), whatever the traffic."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(self, capacity: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: K, value: V) -> None:
        """Stores `value` for `ttl` seconds from now (a new entry goes to the back)."""
        if self.capacity <= 0:
            return
        now = self._clock()
        self._entries.pop(key, None)
        self._entries[key] = (now + self.ttl, value)
        entries = self._entries
        while entries:
            key0 = next(iter(entries))
            if len(entries) <= self.capacity and entries[key0][0] > now:
                break
            del entries[key0]

    def drop(self, key: K) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
