"""How a serving process runs: its event loop, and its heap once start-up is done.

- The event loop is uvloop's when uvloop is installed (the `effectgate[speed]` extra, in the
  container image), else asyncio's own: the same asyncio API either way, less CPU per call with
  uvloop (docs/benchmarks.md).
- After start-up the objects alive then (modules, config, adapters, the gRPC server) are moved out
  of the collector's sight (`gc.freeze`), and the youngest generation is collected after
  `GEN0_THRESHOLD` new container objects instead of 700: a call allocates a few thousand
  short-lived objects, nearly all freed by reference counting, so the collector's passes over the
  young generation (and the full passes over everything alive) were work that found nothing.
- While a command loads its modules and builds what it serves with (`collector_paused`), the
  collector is off: loading makes hundreds of thousands of objects that all live on, and each pass
  over them found next to nothing (a tenth of a second of CPU at every start). It is on again, as
  it was, at the end of each such step; nothing that waits (for a store, a signal) runs inside one.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
GEN0_THRESHOLD = 20_000


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed; None: asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the event loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def settle_heap() -> None:
    """Once start-up is done: freeze what is alive and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (a step of start-up), then as it was."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
