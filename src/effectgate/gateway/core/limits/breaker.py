"""Circuit breakers per tool, per replica, on the protocol's clock.

Closed: provider errors (lost answers, timeouts, 5xx, refusals before acting) are counted over
`window`; `failures` of them open it. Open: new actions are refused (`CircuitOpen`, UNAVAILABLE
with RetryInfo) before anything is stored or sent, for `cooldown`; replays, waits on in-flight
actions, verification and the reconciler go on. Then half-open: one new action is let through as
a probe; its answer closes the breaker, another provider error opens it again. A business
refusal (a declined card) is an answer, not a provider error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from effectgate.gateway.config import BreakerConfig
from effectgate.gateway.core.observer import Observer
from effectgate.gateway.model import CircuitOpen

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class Breaker:
    def __init__(
        self,
        tool: str,
        config: BreakerConfig,
        clock: Callable[[], float],
        observer: Observer,
    ) -> None:
        self.tool = tool
        self._observer = observer
        self.config = config
        self._clock = clock
        self.state = CLOSED
        self._failures: deque[float] = deque()
        self._opened_at = 0.0
        self._probe_at: float | None = None

    def admit(self) -> None:
        """Lets a new action through, or raises CircuitOpen."""
        if self.state == CLOSED:
            return
        now = self._clock()
        if self.state == OPEN:
            left = self._opened_at + self.config.cooldown - now
            if left > 0:
                raise CircuitOpen(self.tool, retry_after=left)
            self._change(HALF_OPEN, f"cool-down of {self.config.cooldown:g}s over; one probe goes through", now)
        # Half-open: one probe at a time (a probe that never reported back is replaced after a cool-down).
        if self._probe_at is not None and now - self._probe_at < self.config.cooldown:
            raise CircuitOpen(self.tool, retry_after=max(self._probe_at + self.config.cooldown - now, 0.5))
        self._probe_at = now

    def record(self, failed: bool) -> None:
        """What one provider call said."""
        now = self._clock()
        if self.state == HALF_OPEN:
            self._probe_at = None
            if failed:
                self._open(now, "the probe failed")
            else:
                self._failures.clear()
                self._change(CLOSED, "the probe was answered", now)
            return
        if not failed or self.state == OPEN:
            return
        self._failures.append(now)
        while self._failures and self._failures[0] <= now - self.config.window:
            self._failures.popleft()
        if len(self._failures) >= self.config.failures:
            self._open(now, f"{len(self._failures)} provider errors within {self.config.window:g}s")

    def _open(self, now: float, why: str) -> None:
        self._opened_at = now
        self._failures.clear()
        self._change(OPEN, f"{why}; new actions refused for {self.config.cooldown:g}s", now)
        self._observer.breaker_opened(self.tool, why, now)

    def _change(self, state: str, why: str, at: float) -> None:
        self.state = state
        self._observer.breaker_changed(self.tool, state, why, at)
