"""What an upstream MCP simulator really did, and the faults it is told to commit.

The ledger is the truth a test counts against: one record per real effect (a sent message, a
created issue), duplicates included. It lives in memory, or in a JSON-lines file when the server
is a child process (stdio): the file outlives a restart, as a provider's database does.

Faults are consumed one per *fresh write* (a write the server would apply: a keyed repeat
answered from the dedup table consumes none), first from a script, in order:

- `drop_after_commit`: applied, then the connection dropped with no answer;
- `slow`: applied, then the answer held back `slow_seconds` (past the caller's timeout);
- `error_no_effect`: an `isError` result and nothing applied;
- `rate_limit`: an `isError` result naming a pause, nothing applied;
- `partial`: applied only partly (the server documents what that means);
- `delayed_visibility`: applied, but the list tool shows it only after `visibility_lag`;
- `restart`: the server goes away on receiving the call (nothing applied) and comes back;
- `misrouted_404`: applied, then answered HTTP 404 with a JSON-RPC error that is not the
  transport's "session not found" (a proxy or a careless server; over stdio a lost answer);
- `lands_late`: applied `slow_seconds` after the call arrived, whatever the caller does (a
  caller that gave up and cancelled does not stop it), then answered.

Faults combine with `+` (`delayed_visibility+drop_after_commit`: applied, hidden from the list
tool for a while, and the answer lost).

A stdio child reads its script from a JSON file (a list) that the test rewrites.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

FAULTS = (
    "drop_after_commit",
    "slow",
    "error_no_effect",
    "rate_limit",
    "partial",
    "delayed_visibility",
    "restart",
    "misrouted_404",
    "lands_late",
)
JsonDict = dict[str, Any]


class Ledger:
    """Effects in order of application; `path` makes it a JSON-lines file shared across restarts."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._memory: list[JsonDict] = []

    def record(self, effect: JsonDict) -> JsonDict:
        effect = {**effect, "at": time.time()}
        with self._lock:
            if self.path is None:
                self._memory.append(effect)
            else:
                with self.path.open("a") as handle:
                    handle.write(json.dumps(effect) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
        return effect

    def effects(self) -> list[JsonDict]:
        with self._lock:
            if self.path is None:
                return list(self._memory)
            if not self.path.exists():
                return []
            return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
            if self.path is not None:
                self.path.write_text("")


class FaultScript:
    """The faults of the next fresh writes (None: no fault); `path` for a child process."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._queue: deque[str | None] = deque()
        self._lock = threading.Lock()

    def script(self, faults: list[str | None]) -> None:
        for fault in faults:
            if fault is not None and not set(fault.split("+")) <= set(FAULTS):
                raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)}, joined by +)")
        with self._lock:
            if self.path is None:
                self._queue.extend(faults)
            else:
                pending = self._read() + list(faults)
                self.path.write_text(json.dumps(pending))

    def next(self) -> str | None:
        with self._lock:
            if self.path is None:
                return self._queue.popleft() if self._queue else None
            pending = self._read()
            if not pending:
                return None
            self.path.write_text(json.dumps(pending[1:]))
            return pending[0]

    def _read(self) -> list[str | None]:
        assert self.path is not None
        if not self.path.exists():
            return []
        text = self.path.read_text().strip()
        loaded = json.loads(text) if text else []
        return list(loaded) if isinstance(loaded, list) else []
