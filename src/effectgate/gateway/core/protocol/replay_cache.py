"""The replay component: what a replay of a settled action is answered from, with no I/O.

Per settled action it keeps the record and the answer a replay gets, and per request already
answered, which action it named; one `drop` forgets the action and its answer together.

- Settled records: only CONFIRMED and REJECTED records without a bypass grant are kept: nothing
  changes them except a bypass (grant, then use), and both go through this process's protocol
  verbs, which drop the entry. Another replica can grant and use a bypass behind this cache's
  back; an entry therefore lives `ttl` seconds from the moment it was read from the store (a hit
  does not extend it), which bounds how long a replay here may still show the previous
  generation's outcome (never a second effect: an Execute with `bypass` always reads the store).
- Answers: the protocol knows no wire format, so an answer is opaque bytes made by the
  serializer the RPC layer hands in (`answer_with`), once per entry, on the first replay that
  asks for it, unless the RPC layer handed it in already (`keep_answer`: made with its answer to
  the Execute that settled the action, from the same message). A changed action is a new
  record and so a new entry: an answer is never reused for a record it was not made from. With
  no serializer (in-process use) there are no answers.
- Known requests: the exact content of a request already answered, mapped to its action id, so
  that the same bytes again skip parsing, normalising and fingerprinting the payload. What it
  maps never goes stale (the action id is a function of the identity, and a payload once checked
  against the action's fingerprint stays checked); it only saves work while the action's entry
  is kept, so it shares the entries' bounds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from effectgate.gateway.model import TERMINAL, ActionRecord

K = TypeVar("K")
V = TypeVar("V")
W = TypeVar("W")


class TtlCache(Generic[K, V]):
    """A bounded first-in-first-out cache whose entries live at most `ttl` seconds after they
    were stored. Every entry gets the same lifetime, so insertion order is expiry order: expired
    entries are purged from the front on every store, and the cache holds at most what the last
    `ttl` seconds stored (and never more than `capacity`), whatever the traffic."""

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

    def follow(self, key: K, then: TtlCache[V, W]) -> W | None:
        """`then.get(self.get(key))`: what `then` keeps under the value kept here for `key` (the
        replay's lookup: the request's action id, then that action's kept answer)."""
        value = self.get(key)
        return None if value is None else then.get(value)

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


CAPACITY = 10_000
TTL = 10.0

# (tenant, run_id, step_id, tool, scope, payload type URL, payload bytes): all an Execute carries
# that decides its answer once the action is settled.
RequestKey = tuple[str, str, str, str, str, str, bytes]
# The RPC layer's answer to a replay of a record: its serialised response.
Serializer = Callable[[ActionRecord], bytes]


def cacheable(record: ActionRecord) -> bool:
    return record.state in TERMINAL and not record.bypass_granted


class Settled:
    """One kept action: its record and, once a replay asked for it, the answer to a replay."""

    __slots__ = ("answer", "record")

    def __init__(self, record: ActionRecord) -> None:
        self.record = record
        self.answer: bytes | None = None


class ReplayCache:
    def __init__(self, capacity: int = CAPACITY, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._settled: TtlCache[str, Settled] = TtlCache(capacity, ttl, clock)
        self._known: TtlCache[RequestKey, str] = TtlCache(capacity, ttl, clock)
        self._serialize: Serializer | None = None

    def answer_with(self, serialize: Serializer) -> None:
        """Set once by the RPC layer: how a replay's answer is made from its record."""
        self._serialize = serialize

    @property
    def ttl(self) -> float:
        return self._settled.ttl

    @property
    def capacity(self) -> int:
        return self._settled.capacity

    def get(self, action_id: str) -> ActionRecord | None:
        entry = self._settled.get(action_id)
        return None if entry is None else entry.record

    def known(self, key: RequestKey) -> Settled | None:
        """The kept action this exact request was answered with before (the replay's lookup)."""
        return self._known.follow(key, self._settled)

    def learn(self, key: RequestKey, action_id: str) -> None:
        """The request was answered with `action_id` (its payload passed the fingerprint check)."""
        self._known.put(key, action_id)

    def put(self, record: ActionRecord) -> Settled | None:
        """Keeps a record just read from the store or just settled by this process, and returns
        its entry (None when the record is not kept). The entry already holding this very record
        is returned as it is: it keeps its answer and its original expiry."""
        if not cacheable(record):
            return None
        entry = self._settled.get(record.action_id)
        if entry is None or entry.record is not record:
            entry = Settled(record)
            self._settled.put(record.action_id, entry)
        return entry

    def replay(self, record: ActionRecord) -> bytes | None:
        """Keeps `record` (see `put`) and returns the answer to its replay (None when the record is
        not kept, or with no serializer)."""
        entry = self.put(record)
        return None if entry is None else self.answer(entry)

    def answer(self, entry: Settled) -> bytes | None:
        """The entry's answer, made on first use (None without a serializer)."""
        answer = entry.answer
        if answer is None and self._serialize is not None:
            answer = entry.answer = self._serialize(entry.record)
        return answer

    def unanswered(self, record: ActionRecord) -> bool:
        """Whether this very record is kept, still without its answer (`keep_answer`)."""
        return self._entry_without_answer(record) is not None

    def keep_answer(self, record: ActionRecord, answer: bytes) -> None:
        """The answer to a replay of this very record, made by the RPC layer with its answer to
        the Execute that settled it (the serializer's bytes, without building them again), so
        that even the first replay serialises nothing. Kept only while the entry holds this
        record without an answer: never for another record."""
        entry = self._entry_without_answer(record)
        if entry is not None:
            entry.answer = answer

    def _entry_without_answer(self, record: ActionRecord) -> Settled | None:
        """The entry holding this very record and no answer yet; None for any other case."""
        entry = self._settled.get(record.action_id)
        return entry if entry is not None and entry.record is record and entry.answer is None else None

    def drop(self, action_id: str) -> None:
        """Forgets the action: its record and its answer (the only invalidation)."""
        self._settled.drop(action_id)

    def __len__(self) -> int:
        return len(self._settled)
