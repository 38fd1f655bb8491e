"""The order that lets two xdist workers finish together: the known-slow tests first, dealt out.

`--dist worksteal` gives each worker an equal, contiguous share of the collected tests (the first
half to one, the second to the other) and a worker that runs dry steals the tail of another's
queue. A slow test that starts last keeps its worker busy long after the other one has stopped,
so the run is at least as long as its slowest tail. Here the tests named in tests/slow_tests.txt
(with the seconds each took; `scripts/slow_tests.py` rewrites it from a run's JUnit XML) are
dealt to the workers' shares longest first, each to the share with the least slow work so far,
and put at the head of that share; every other test keeps its collected order behind them. The
tests of a group (tests/conftest.py: those that wait for the run's wheelhouse) go to one share
together, so one worker builds while the other runs tests instead of waiting on the lock.
The set of tests run is untouched: only their order changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

LIST = Path(__file__).resolve().parent / "slow_tests.txt"

T = TypeVar("T")


class Slow(NamedTuple):
    seconds: float
    group: str  # tests of one group share a run-wide fixture (the wheelhouse): one share runs them


def known_slow(text: str) -> dict[str, Slow]:
    """`node id  seconds` per line (node ids may hold spaces; lines starting `#` and blank ones
    skipped). Each test is a group of its own."""
    known: dict[str, Slow] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            nodeid, took = line.rsplit(None, 1)
            known[nodeid] = Slow(float(took), nodeid)
    return known


def shares(total: int, workers: int) -> list[int]:
    """How many tests worksteal's first schedule hands each worker (xdist/scheduler/worksteal.py)."""
    sizes, left = [], total
    for i in range(workers):
        sizes.append(left // (workers - i))
        left -= sizes[-1]
    return sizes


def slow_first(items: Sequence[T], nodeid: dict[int, str], known: dict[str, Slow], workers: int) -> list[T]:
    """`items` reordered so that each worker's share starts with its part of the slow tests (a
    group's tests together, in one share). `nodeid` maps id(item) to the item's node id."""
    groups: dict[str, list[T]] = {}
    for item in items:
        if nodeid[id(item)] in known:
            groups.setdefault(known[nodeid[id(item)]].group, []).append(item)
    if not groups:
        return list(items)

    def seconds(group: list[T]) -> float:
        return sum(known[nodeid[id(item)]].seconds for item in group)

    def longest_first(group: list[T]) -> list[T]:
        return sorted(group, key=lambda item: -known[nodeid[id(item)]].seconds)

    units = sorted((longest_first(group) for group in groups.values()), key=seconds, reverse=True)
    taken = {id(item) for unit in units for item in unit}
    rest = [item for item in items if id(item) not in taken]
    sizes = shares(len(items), max(1, workers))
    heads: list[list[T]] = [[] for _ in sizes]
    load = [0.0 for _ in sizes]
    for unit in units:  # longest first, to the share with the least slow work that has room
        fits = [i for i in range(len(sizes)) if len(heads[i]) + len(unit) <= sizes[i]] or [load.index(min(load))]
        chosen = min(fits, key=lambda i: load[i])
        heads[chosen] += unit
        load[chosen] += seconds(unit)
    ordered: list[T] = []
    for head, size in zip(heads, sizes, strict=True):
        fill = max(0, size - len(head))
        ordered += head + rest[:fill]
        rest = rest[fill:]
    return ordered + rest
