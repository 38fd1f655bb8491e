"""The clock watch: re-anchors the store clock and keeps a skewed replica out of the work.

Every `interval` (at most the reconcile interval) it probes the store's clock (`StoreClock.probe`),
publishes the offset (the `effectgate.clock.offset` gauge), and compares it with the bound
(`Config.clock_skew_bound`). Beyond the bound the replica takes no work — Execute answers
UNAVAILABLE with reason CLOCK_SKEW before anything is stored or sent, the reconciler claims
nothing, a drive stops before its next send, health is NOT_SERVING — until a probe finds the
offset back within the bound. Each change is one log line (both at WARNING: the recovery closes
an episode an operator was warned about).

Until a probe has answered in time the replica takes no work either: its clock is then its host's,
unchecked, and a host far off would read leases and windows wrong (the simulator's seed 5: a
replica whose first probe met a store fault claimed with a lease already expired on the store's
clock, and another replica proved the action absent while its request was at the provider).

A job function with its own loop (`watch_clock`) and one pass (`ClockWatch.check`), so that it can
move onto a shared runner of background jobs as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from effectgate.gateway.observability import metrics
from effectgate.gateway.store import StoreClock, StoreUnavailable, skew_problem

log = logging.getLogger("effectgate.clock")

UNREAD = "the store's clock has not been read yet (no probe answered in time)"


class ClockWatch:
    def __init__(
        self,
        clock: StoreClock,
        bound: float,
        *,
        on_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.clock = clock
        self.bound = bound
        self.on_change = on_change
        # The current problem ("" while the clock is trusted); read by the protocol and readiness.
        self.problem = UNREAD
        # Whether the current problem was logged (the first verdict of a start-up is not a change).
        self._warned = False

    def __call__(self) -> str:
        return self.problem

    async def check(self) -> str:
        """One probe and its verdict; returns the problem ("" when none)."""
        try:
            await self.clock.probe()
        except StoreUnavailable as exc:
            # The anchor stays valid on the monotonic clock; store writes fail on their own.
            log.debug("clock probe failed: %s", exc)
            problem = self.problem
        else:
            if self.clock.read:
                metrics.clock_offset(self.clock.offset)
            problem = skew_problem(self.clock, self.bound) if self.clock.read else UNREAD
        changed = bool(problem) != bool(self.problem)
        self.problem = problem
        # Health and the reconciler follow first, so whoever reads the line sees them changed.
        if changed and self.on_change is not None:
            await self.on_change()
        if problem and not self._warned:
            log.warning("clock skew: %s; not claiming or sending, health NOT_SERVING", problem)
        elif not problem and self._warned:
            log.warning(
                "clock skew over: this host's clock is %+.3fs off the store's (bound %gs); serving again",
                -self.clock.offset,
                self.bound,
            )
        self._warned = bool(problem)
        return problem


async def watch_clock(watch: ClockWatch, interval: float, stop: asyncio.Event) -> None:
    """Runs `watch.check()` every `interval` seconds until `stop` is set."""
    while not stop.is_set():
        try:
            await watch.check()
        except Exception:  # a bug must not stop the watch: the last verdict stands
            log.exception("clock watch failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
