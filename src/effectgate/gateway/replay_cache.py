"""A bounded per-process cache of settled records, so a replay is answered with no I/O.

Only CONFIRMED and REJECTED records without a bypass grant are kept: nothing changes them except
a bypass (grant, then use), and both go through this process's protocol verbs, which drop the
entry. Another replica can grant and use a bypass behind this cache's back; entries therefore
expire after `ttl` seconds, which bounds how long a replay here may still show the previous
generation's outcome (never a second effect: an Execute with `bypass` always reads the store).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from effectgate.gateway.domain import ActionRecord

CAPACITY = 10_000
TTL = 10.0


def cacheable(record: ActionRecord) -> bool:
    return record.state.terminal and not record.bypass_granted


class SettledCache:
    def __init__(self, capacity: int = CAPACITY, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, ActionRecord]] = OrderedDict()

    def get(self, action_id: str) -> ActionRecord | None:
        entry = self._entries.get(action_id)
        if entry is None:
            return None
        expires, record = entry
        if self._clock() >= expires:
            del self._entries[action_id]
            return None
        self._entries.move_to_end(action_id)
        return record

    def put(self, record: ActionRecord) -> None:
        if self.capacity <= 0 or not cacheable(record):
            return
        self._entries[record.action_id] = (self._clock() + self.ttl, record)
        self._entries.move_to_end(record.action_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def drop(self, action_id: str) -> None:
        self._entries.pop(action_id, None)

    def __len__(self) -> int:
        return len(self._entries)
