"""Closed-loop load: `concurrency` workers call one function until `n` calls are done; every call
is timed. The same generator drives every path, so the ratios compare like with like."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    path: str  # direct, echo, new, replay, duplicate
    setup: str  # e.g. "sqlite FULL, 1k stored"
    concurrency: int
    calls: int
    p50_ms: float
    p99_ms: float
    per_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def measure(
    path: str,
    setup: str,
    n: int,
    concurrency: int,
    one: Callable[[int], Awaitable[object]],
    *,
    calls_per_op: int = 1,
) -> Figure:
    """Runs `one(0..n-1)` with `concurrency` in flight; `calls_per_op` counts the RPCs one op makes
    (a duplicate pair is two) so that calls/s stays comparable."""
    samples: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < n:
            i = next_index
            next_index += 1
            start = time.perf_counter()
            await one(i)
            samples.append(time.perf_counter() - start)

    wall = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    wall = time.perf_counter() - wall
    ordered = sorted(samples)
    return Figure(
        path=path,
        setup=setup,
        concurrency=concurrency,
        calls=n * calls_per_op,
        p50_ms=percentile(ordered, 0.5) * 1000,
        p99_ms=percentile(ordered, 0.99) * 1000,
        per_s=n * calls_per_op / wall,
    )
