"""An idempotency-key store for simulators, with Stripe's rules.

- The first answer of an endpoint that started executing is kept per key (500s included) and
  replayed to every later request with that key and the same parameters.
- The same key with other parameters (or another endpoint) is a mismatch.
- A request whose key is held by a request still in flight is told so (Stripe answers 409).
- A request that never executed (auth or validation failure, injected conflict) stores nothing:
  `release` frees the key.

The store only answers what happened; the HTTP status and body of each case are the simulator's.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from effectgate_lab.simulators.server import SimResponse


def fingerprint(*parts: Any) -> str:
    """A stable hash of the request's method, path and parameters."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ClaimState(enum.Enum):
    NEW = "new"  # the caller executes, then completes or releases the slot
    REPLAY = "replay"  # `response` is the stored answer
    MISMATCH = "mismatch"  # the key was used with other parameters
    IN_FLIGHT = "in_flight"  # another request with this key has not answered yet


@dataclass
class _Entry:
    fingerprint: str
    response: SimResponse | None = None  # None while in flight


class KeySlot:
    """The right to answer a NEW key once; satisfies `server.AnswerSlot`."""

    def __init__(self, store: IdempotencyStore, key: str) -> None:
        self._store = store
        self.key = key
        self._done = False

    def complete(self, response: SimResponse) -> None:
        if not self._done:
            self._done = True
            self._store._entries[self.key].response = response

    def release(self) -> None:
        if not self._done:
            self._done = True
            self._store._entries.pop(self.key, None)


@dataclass(frozen=True)
class Claim:
    state: ClaimState
    response: SimResponse | None = None
    slot: KeySlot | None = None


class IdempotencyStore:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def claim(self, key: str, request_fingerprint: str) -> Claim:
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(request_fingerprint)
            return Claim(ClaimState.NEW, slot=KeySlot(self, key))
        if entry.response is None:
            return Claim(ClaimState.IN_FLIGHT)
        if entry.fingerprint != request_fingerprint:
            return Claim(ClaimState.MISMATCH)
        return Claim(ClaimState.REPLAY, response=entry.response)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
