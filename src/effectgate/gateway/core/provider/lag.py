"""A consistency window that learns: how long after a confirmed write the provider's read API
first shows it, per lag key (docs/webhooks.md).

`LagSampler` follows one confirmed write in `sample_every` with read-backs that carry no
receipt (the path a lost answer's verification takes: search, list), polling at growing
intervals up to `probe_limit`. A lag runs from the moment the write was sent (before the provider
could commit it) to the moment the first read that shows it came back (after it became
visible), so a measurement errs long, never short, however late a busy gateway handles the
answer or the read. Once lags of its key are known, a probe's first read
waits for half the shortest of them: the reads before it would only find nothing (a provider
lagging 4 s took about 19 reads per probe, now 5), and a lag shorter than that start is
measured as the start, long, which makes the next probe start earlier. Each lag goes to the
store's provider log (so that `effectgate check` and other replicas read it), to `LagBook` (the
in-process quantiles) and to the metrics. `LagBook.window` is what `consistency_window = "auto"`
uses: the adapter's declared window until `min_samples` lags are known, then
max(floor, p99 x (1 + margin)).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from effectgate.adapters.base import ActionCall, Adapter, Outcome
from effectgate.gateway.config import ConsistencySection, ToolConfig
from effectgate.gateway.core.observer import Observer
from effectgate.gateway.model import ActionRecord
from effectgate.gateway.store import Store, StoreUnavailable

log = logging.getLogger("effectgate.lag")
KEEP = 2000
FIRST_POLL, GROWTH, MAX_POLL = 0.02, 1.25, 2.0
MAX_PROBES = 16  # probes running at once


def quantile(values: Iterable[float], q: float) -> float:
    """Nearest-rank quantile (the p99 of 20 lags is their maximum: never optimistic)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class LagBook:
    """The observed read lags by lag key, with the quantiles and the learned window."""

    def __init__(self, settings: ConsistencySection | None = None) -> None:
        self.settings = settings or ConsistencySection()
        self._lags: dict[str, deque[float]] = {}

    def add(self, key: str, lag: float) -> None:
        self._lags.setdefault(key, deque(maxlen=KEEP)).append(lag)

    def count(self, key: str) -> int:
        return len(self._lags.get(key, ()))

    def quantile(self, key: str, q: float) -> float:
        return quantile(self._lags.get(key, ()), q)

    def shortest(self, key: str) -> float:
        """The shortest lag kept (0.0 when none)."""
        return min(self._lags.get(key, ()), default=0.0)

    def window(self, key: str, declared: float) -> float:
        s = self.settings
        if self.count(key) < s.min_samples:
            return declared
        return max(s.floor, self.quantile(key, 0.99) * (1 + s.margin))

    async def load(self, store: Store, keys: Iterable[str]) -> None:
        """The lags the store kept (earlier runs, other replicas), newest last."""
        for key in sorted(set(keys)):  # in one order: the store's reads (and a simulation's faults) replay
            try:
                lags = await store.read_lags(key, KEEP)
            except (NotImplementedError, StoreUnavailable):
                continue
            self._lags[key] = deque(lags, maxlen=KEEP)


def too_short(window: float, p99: float) -> bool:
    return window < p99


class SampledTool(Protocol):
    """What the sampler reads of a tool (`core.tools.BoundTool`, which holds a `LagBook`)."""

    @property
    def config(self) -> ToolConfig: ...
    @property
    def adapter(self) -> Adapter: ...
    @property
    def name(self) -> str: ...
    @property
    def lag_key(self) -> str: ...
    def action_call(self, record: ActionRecord, *, receipt: bool = True) -> ActionCall: ...


class LagSampler:
    """Starts a probe after one confirmed write in `sample_every` (`on_answered`)."""

    def __init__(
        self, store: Store, book: LagBook, clock: Callable[[], float] = time.time, observer: Observer | None = None
    ) -> None:
        self._store = store
        self._observer = observer if observer is not None else Observer()
        self._book = book
        self._clock = clock
        self._seen = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned: set[str] = set()

    def on_answered(self, record: ActionRecord, tool: SampledTool, sent_at: float) -> None:
        """`sent_at`: when the call that was answered left (this sampler's clock)."""
        every = self._book.settings.sample_every
        if every <= 0 or not tool.adapter.capabilities.has_read_api or len(self._tasks) >= MAX_PROBES:
            return
        self._seen += 1
        if self._seen % every:
            return
        task = asyncio.get_running_loop().create_task(self._probe(record, tool, sent_at))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _probe(self, record: ActionRecord, tool: SampledTool, sent_at: float) -> None:
        call = tool.action_call(record, receipt=False)
        limit = self._book.settings.probe_limit
        pause = FIRST_POLL
        start = min(self._book.shortest(tool.lag_key) / 2, limit)
        if start > FIRST_POLL:  # earlier reads would find nothing (see the module's docstring)
            await asyncio.sleep(max(0.0, start - (self._clock() - sent_at)))
            pause = min(start * (GROWTH - 1), MAX_POLL)  # the step the growing pauses have there
        while True:
            try:
                async with asyncio.timeout(tool.config.attempt_timeout):
                    observation = await tool.adapter.verify(call)
            except Exception:  # a failed read tells nothing about the lag
                return
            if observation.outcome is Outcome.CONFIRMED:
                await self._record(tool, max(0.0, self._clock() - sent_at))
                return
            if observation.outcome is not Outcome.NOT_FOUND or self._clock() - sent_at > limit:
                return
            await asyncio.sleep(pause)
            pause = min(pause * GROWTH, MAX_POLL)

    async def _record(self, tool: SampledTool, lag: float) -> None:
        key = tool.lag_key
        self._book.add(key, lag)
        p50, p99 = self._book.quantile(key, 0.5), self._book.quantile(key, 0.99)
        self._observer.read_lag(key, lag, p50, p99)
        with contextlib.suppress(NotImplementedError, StoreUnavailable):
            await self._store.record_read_lag(key, self._clock(), lag)
        configured = tool.config.consistency_window
        enough = self._book.count(key) >= self._book.settings.min_samples
        if isinstance(configured, float) and enough and too_short(configured, p99) and key not in self._warned:
            self._warned.add(key)
            log.warning(
                "tool %s: consistency_window %gs is shorter than the observed p99 read lag %.3fs of %s "
                "(%d samples): a read-back may take a write that is not visible yet for absence",
                tool.name,
                configured,
                p99,
                key,
                self._book.count(key),
            )

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
