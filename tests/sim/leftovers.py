"""What a world leaves behind, reported on its own seed.

A future or task that holds an exception nobody read is reported ("Future exception was never
retrieved") when the garbage collector frees it, to the exception handler of the loop it was
made on: its world's, so the report is that world's violation. But the collector frees it when it
chooses (how much the process allocated before), or not before the process ends: the report came
in one run of seeds and not in another, after the seed's trace and digest were taken, or never
(seed 42176 of the long run, in its chunk and not alone). `play` runs a world and then collects,
once the world is unreachable: what it left unread is reported then, on its seed, in its trace.

A full collection walks every object the process holds (the gateway's modules and their
libraries): about 60 ms, more than a small seed takes. `played` hands out a `play` for a run of
worlds that freezes what is alive before the first world and after each one (`gc.freeze`: the
collector no longer walks it), so each collection walks what the last world made: about 1 ms.
A frozen object is still freed when nothing refers to it; one freed only as part of a cycle is
freed once the run ends (what outlives a world, its outcome and the modules it imported, is
rarely so).

While a world runs the collector is off: its young-generation passes (about three a world) cost
about 1.5% of a run's CPU, and what they freed is freed by that one collection when the world
ends, still on its seed. A trace does not depend on when the collector runs (it already runs at
other moments for the same seed run alone or after others: caches warmed by earlier worlds change
what a world allocates), and a world's frozen tasks are kept alive by the world until it ends.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from tests.sim.world import Knobs, Outcome, World

Play = Callable[[int, "Knobs | None"], Outcome]


def play(seed: int, knobs: Knobs | None = None) -> Outcome:
    """`World(seed, knobs).run()` with the collector off, then a full collection (see the
    module's docstring)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        outcome = World(seed, knobs).run()
    finally:
        if enabled:
            gc.enable()
    gc.collect()
    return outcome


@contextlib.contextmanager
def played() -> Iterator[Play]:
    """A `play` whose collections walk only what the last world made (see the module's docstring)."""
    gc.collect()  # nothing that is garbage now is frozen
    gc.freeze()

    def cheap(seed: int, knobs: Knobs | None = None) -> Outcome:
        outcome = play(seed, knobs)
        gc.freeze()  # what outlived this world is walked no more
        return outcome

    try:
        yield cheap
    finally:
        gc.unfreeze()
