"""A gateway's graceful shutdown under one deadline: `server.shutdown_grace` from the moment it
begins, shared by every phase (issue 46: each phase had the whole grace of its own — the gRPC
server waited for its calls, then the drives were waited for again — and a replica with a 5 s
grace took 8.4 s, past the `terminationGracePeriodSeconds` docs/deploy.md derives from it).

The phases that wait for work (the calls, the drives) end a little before the deadline: closing
(background jobs, adapters, the store) keeps a share of the grace (`CLOSING_SHARE`, at most
`CLOSING_MAX`), so a drive that runs to the end cannot leave the store open past it. A phase that
overruns what is left is abandoned (logged); the work it leaves behind stays DISPATCHED under its
lease for the next reconciler, as the drives' do. The gateway logs each phase's budget and time,
so a supervisor (and a test) can see they shared one deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger("effectgate.server")
CLOSING_SHARE = 0.25
CLOSING_MAX = 1.0
# Closing is never given less than this (a grace this short is exceeded by at most this much):
# a store abandoned at once would be left open by every gateway stopped with no grace at all.
CLOSING_FLOOR = 0.25


@dataclass
class Phase:
    name: str
    budget: float  # seconds it was given: what was left of the deadline when it began
    took: float = 0.0
    abandoned: bool = False


@dataclass
class ShutdownDeadline:
    grace: float
    clock: Callable[[], float] = time.monotonic
    phases: list[Phase] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.closing_reserve = min(self.grace * CLOSING_SHARE, CLOSING_MAX)

    def left(self, *, closing: bool = False) -> float:
        """Seconds until the deadline (for work, less the share kept for closing)."""
        if closing:
            return max(self.started + self.grace - self.clock(), CLOSING_FLOOR)
        return max(self.started + self.grace - self.closing_reserve - self.clock(), 0.0)

    async def run(
        self, name: str, step: Callable[[float], Awaitable[object]], *, closing: bool = False, honours: bool = False
    ) -> None:
        """Runs `step(budget)` with what is left of the deadline. A step that `honours` its budget
        (grpc's `stop(grace)`, `asyncio.wait(timeout=...)`) ends itself on time and is never
        interrupted; any other is abandoned when the budget is spent."""
        phase = Phase(name, self.left(closing=closing))
        self.phases.append(phase)
        began = self.clock()
        try:
            if honours:
                await step(phase.budget)
            else:
                await asyncio.wait_for(step(phase.budget), timeout=phase.budget)
        except TimeoutError:
            phase.abandoned = True
            log.warning("shutdown: %s did not finish within the grace; left behind", name)
        finally:
            phase.took = self.clock() - began

    def report(self) -> None:
        """One log line: the whole shutdown against the grace, and each phase's budget and time."""
        took = self.clock() - self.started
        phases = "; ".join(
            f"{p.name} {p.took:.3f}s of {p.budget:.3f}s{' (abandoned)' if p.abandoned else ''}" for p in self.phases
        )
        log.info(
            "shutdown took %.3fs of a %.3fs grace: %s",
            took,
            self.grace,
            phases,
            extra={
                "shutdown_seconds": round(took, 3),
                "shutdown_grace": self.grace,
                "phases": [
                    {"name": p.name, "budget": round(p.budget, 3), "took": round(p.took, 3), "abandoned": p.abandoned}
                    for p in self.phases
                ],
            },
        )
