"""One clock for every replica of one store: the store's own.

Every time the protocol writes or compares — a lease's expiry, the dispatch and attempt-end
times that open the consistency window, the moment a read-back was sent, `next_check_at`, a
provider's Retry-After pause, a caller's deadline — is read from `StoreClock`, so two replicas
on one PostgreSQL agree on "has this lease run out" and "is this read past the window" even when
their hosts' clocks do not (docs/protocol.md, "Clocks").

How: a probe reads the store's clock in one round trip (`Store.clock`, PostgreSQL's
`clock_timestamp()`) and anchors it to this process's monotonic clock at the middle of the round
trip; between probes the clock is `store time at the anchor + monotonic time elapsed since`. A
step of the host's wall clock (NTP, an operator, a VM resume) therefore never moves it; the error
is at most half the probe's round trip plus the monotonic clock's drift since (parts per million).
Why not `now()` inside every statement instead: the worker's own decisions ("may I still send",
the call's cap, "is this read past the window") are made between statements, so they need the
store's time locally anyway; one clock for both keeps every comparison on the same scale, and a
periodic probe costs nothing per Execute (no extra round trip, no change to any statement).

A store without a clock of its own (SQLite, one host) leaves this the host's clock, offset 0.

`offset` (store minus host, at the last probe) is what the skew guard watches: the protocol is
safe with any offset, but a host whose clock is far from its store's is broken (NTP not running,
a clock being stepped) and other readers of that clock (TLS validity, provider request
signatures, log and trace timestamps) are not corrected; see `background/clock_watch.py`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from effectgate.gateway.store.base import Store

# A probe whose round trip took longer than this is ignored (its midpoint is too uncertain).
MAX_PROBE_RTT = 0.5


class StoreClock:
    """Callable: the store's time now, in Unix seconds. `await probe()` re-anchors it."""

    def __init__(
        self,
        store: Store,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._wall = wall
        self._monotonic = monotonic
        # (store time, monotonic time) at the middle of the last accepted probe.
        self._anchor: tuple[float, float] | None = None
        self._last = 0.0
        # Store minus host clock at the last accepted probe, and that probe's round trip.
        self.offset = 0.0
        self.rtt = 0.0
        # Whether the store has a clock of its own (False: SQLite; this clock is the host's).
        self.shared = False
        # Whether a probe has answered in time: until then this is the host's clock, unchecked.
        self.read = False

    def __call__(self) -> float:
        if self._anchor is None:
            return self._wall()
        at_store, at_mono = self._anchor
        # Never backwards: a re-anchor may land a little behind (within half a round trip).
        self._last = max(self._last, at_store + (self._monotonic() - at_mono))
        return self._last

    async def sleep(self, seconds: float) -> None:
        """Waits in real time (the store's clock runs at the monotonic clock's rate)."""
        await asyncio.sleep(seconds)

    async def probe(self) -> bool:
        """Reads the store's clock once (raises StoreUnavailable when it cannot). Returns False
        when the answer was too slow to trust and an earlier anchor was kept."""
        mono0, wall0 = self._monotonic(), self._wall()
        at_store = await self._store.clock()
        mono1, wall1 = self._monotonic(), self._wall()
        if at_store is None:
            self.offset, self.rtt, self.shared, self.read = 0.0, 0.0, False, True
            return True
        rtt = mono1 - mono0
        if rtt > MAX_PROBE_RTT:
            # Too slow to anchor on, even the first: the store read its clock anywhere within
            # the round trip, so the anchor could be off by half of it (a first probe stalled
            # for 36 s made a replica's clock 18 s fast and it proved an absence inside the
            # window; the skew guard allows rtt/2). The clock stays as it was until a quick one.
            return False
        self._anchor = (at_store, (mono0 + mono1) / 2)
        self.offset = at_store - (wall0 + wall1) / 2
        self.rtt = rtt
        self.shared = self.read = True
        return True


def skew_problem(clock: StoreClock, bound: float) -> str:
    """What is wrong with this host's clock ("" when nothing): an offset beyond `bound` even at
    the near edge of what the probe can tell. The store read its clock somewhere within the
    probe's round trip, so the true offset is within half of it of the measured one: a probe
    slowed on one side only (a loaded host, the reconnect that follows a database restart, a
    query queued behind others) moves the measured offset by up to that much, and is not a skew."""
    if clock.shared and abs(clock.offset) - clock.rtt / 2 > bound:
        return f"this host's clock is {-clock.offset:+.3f}s off the store's (bound {bound:g}s)"
    return ""
