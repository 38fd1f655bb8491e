"""Sign-in attempts that failed, counted per browser address and per token digest in a sliding
window: past the limit, a sign-in is answered 429 without asking the gateway. A wrong token
costs the one who tries it, not the gateway; a token guessed from many addresses is still
stopped by its digest. Bounded: the least recently seen keys are forgotten first."""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class SignInThrottle:
    def __init__(
        self,
        *,
        per_address: int = 10,
        per_token: int = 5,
        window: float = 60.0,
        keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_address, self.per_token, self.window, self.keys, self.clock = (
            per_address,
            per_token,
            window,
            keys,
            clock,
        )
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @staticmethod
    def digest(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()[:16]

    def wait(self, address: str, token: str) -> float:
        """Seconds before this address (or this token) may try again; 0 when it may now."""
        now = self.clock()
        waits = [
            self._wait(f"a:{address}", self.per_address, now),
            self._wait(f"t:{self.digest(token)}", self.per_token, now),
        ]
        return max(waits)

    def failed(self, address: str, token: str) -> None:
        now = self.clock()
        for key in (f"a:{address}", f"t:{self.digest(token)}"):
            times = self._failures.setdefault(key, deque())
            times.append(now)
            self._failures.move_to_end(key)
        while len(self._failures) > self.keys:
            self._failures.popitem(last=False)

    def _wait(self, key: str, limit: int, now: float) -> float:
        times = self._failures.get(key)
        if times is None:
            return 0.0
        while times and now - times[0] >= self.window:
            times.popleft()
        if len(times) < limit:
            return 0.0
        # Bounded: at most `limit` entries are kept per key.
        while len(times) > limit:
            times.popleft()
        return max(math.ceil(self.window - (now - times[0])), 1)
