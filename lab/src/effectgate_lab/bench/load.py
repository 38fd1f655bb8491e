"""Closed-loop load: `concurrency` workers call one function until `n` calls are done; every call
is timed. The same generator drives every path, so the ratios compare like with like.

`Interleaved` measures several paths in rounds (A, B, C, A, B, C, ...) and merges each path's
rounds: on a shared machine whose speed drifts over minutes, paths measured side by side see the
same drift, and their ratios stay meaningful. A path may name the process that serves it: the CPU
time that process (and its workers) spent during the path's rounds is reported per call, which
tells a server that waits from one that computes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from effectgate_lab.labkit.children import cpu_seconds

One = Callable[[int], Awaitable[object]]


@dataclass(frozen=True)
class Figure:
    path: str  # direct, echo, new, replay, duplicate
    setup: str  # e.g. "sqlite FULL, 1k stored"
    concurrency: int
    calls: int
    p50_ms: float
    p99_ms: float
    per_s: float
    # CPU time the serving process spent per call (None: not measured for this path).
    server_cpu_us: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


@dataclass
class Tally:
    """Timed calls of one path, over one or more rounds."""

    samples: list[float] = field(default_factory=list)
    wall: float = 0.0
    calls: int = 0
    server_cpu: float | None = None  # seconds, when the serving process is known

    def figure(self, path: str, setup: str, concurrency: int) -> Figure:
        ordered = sorted(self.samples)
        cpu = None if self.server_cpu is None or not self.calls else self.server_cpu / self.calls * 1e6
        return Figure(
            path=path,
            setup=setup,
            concurrency=concurrency,
            calls=self.calls,
            p50_ms=percentile(ordered, 0.5) * 1000,
            p99_ms=percentile(ordered, 0.99) * 1000,
            per_s=self.calls / self.wall if self.wall else 0.0,
            server_cpu_us=cpu,
        )


async def run_load(tally: Tally, first: int, n: int, concurrency: int, one: One, *, calls_per_op: int = 1) -> None:
    """Runs `one(first..first+n-1)` with `concurrency` in flight into `tally`; `calls_per_op`
    counts the RPCs one op makes (a duplicate pair is two) so that calls/s stays comparable."""
    next_index = first
    end = first + n

    async def worker() -> None:
        nonlocal next_index
        while next_index < end:
            i = next_index
            next_index += 1
            start = time.perf_counter()
            await one(i)
            tally.samples.append(time.perf_counter() - start)

    wall = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    tally.wall += time.perf_counter() - wall
    tally.calls += n * calls_per_op


async def measure(path: str, setup: str, n: int, concurrency: int, one: One, *, calls_per_op: int = 1) -> Figure:
    """One path on its own: `n` ops at `concurrency`."""
    tally = Tally()
    await run_load(tally, 0, n, concurrency, one, calls_per_op=calls_per_op)
    return tally.figure(path, setup, concurrency)


@dataclass
class _Path:
    path: str
    setup: str
    one: One
    ops: int
    calls_per_op: int
    concurrency: int
    server_pid: int | None
    tally: Tally = field(default_factory=Tally)


class Interleaved:
    """Paths measured in rounds at one concurrency: `add` each path, then `run(rounds)`.

    A path's ops in round r are `one(r * per_round + i)`: a path whose ops create something (a
    new action) gets fresh indices in every round, and a path that repeats another's ops (a
    replay of those actions) sees the same indices when it is added after it."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._paths: list[_Path] = []

    def add(
        self,
        path: str,
        setup: str,
        one: One,
        ops: int,
        *,
        calls_per_op: int = 1,
        concurrency: int | None = None,
        server_pid: int | None = None,
    ) -> None:
        self._paths.append(_Path(path, setup, one, ops, calls_per_op, concurrency or self.concurrency, server_pid))

    async def run(self, rounds: int) -> list[Figure]:
        for r in range(rounds):
            for p in self._paths:
                per_round = max(1, p.ops // rounds)
                pid = p.server_pid
                cpu_before = 0.0 if pid is None else cpu_seconds(pid)
                await run_load(p.tally, r * per_round, per_round, p.concurrency, p.one, calls_per_op=p.calls_per_op)
                if pid is not None:
                    p.tally.server_cpu = (p.tally.server_cpu or 0.0) + cpu_seconds(pid) - cpu_before
        return [p.tally.figure(p.path, p.setup, self.concurrency) for p in self._paths]
