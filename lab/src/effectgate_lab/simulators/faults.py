"""Seeded fault injection shared by every provider simulator.

A simulator asks its `FaultInjector` for a decision once per *fresh write*: a write request that
passed auth and validation and is not answered from an idempotency store (replays, rejected and
read requests never consume a fault, so a scripted test stays exact). The decision is one
`Fault` or `None`, and the simulator applies it (see `SimulatorServer.write` for the shared
order of events):

- `drop_after_commit`: the effect is applied and the idempotent answer stored, then the
  connection is closed with no HTTP answer (a lost response).
- `error_after_commit`: the effect is applied, then the answer is an HTTP 500 (and that 500 is
  what an idempotency store keeps, as Stripe keeps 500s).
- `slow`: the effect is applied, then the answer is held back `slow_seconds`.
- `conflict`: HTTP 409 and no effect (and nothing stored under the idempotency key).
- `partial`: the effect is applied only partly; each simulator documents what that means.
- `delayed_visibility`: the effect shows up in search/list reads only after `visibility_lag`
  seconds (reads by id stay immediate, as at Stripe).
- `drop_delayed`: both of the above on one write, a lost response whose effect reads do not show
  yet (the study draws its timeout and delayed-visibility faults independently, so they meet).
- `rate_limit`: HTTP `rate_limit_status` (429 by default) with `Retry-After: <retry_after>` (no
  header when `retry_after` is None) and no effect (nothing stored under the idempotency key).
- `drop_before_commit`: the connection is closed with no HTTP answer *before* anything is applied
  (a timeout that lost the request, not the response).
- `lands_late`: the effect is applied `slow_seconds` after the request arrived, whatever the caller
  does meanwhile (a caller that gave up and hung up does not stop it), then answered: a provider
  still processing a request its caller timed out on. Reads show nothing until it lands.

Decisions come first from a scripted queue (`script([...])`, for exact tests), then from the
random plan: one `random.Random(seed)` draw per decision, walked through the kinds in the fixed
order of `FAULT_KINDS`, so a given seed and request order always give the same faults.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


class Fault(enum.StrEnum):
    DROP_AFTER_COMMIT = "drop_after_commit"
    ERROR_AFTER_COMMIT = "error_after_commit"
    SLOW = "slow"
    CONFLICT = "conflict"
    PARTIAL = "partial"
    DELAYED_VISIBILITY = "delayed_visibility"
    # Appended last: the draw walks kinds in this order, so earlier plans keep their faults.
    DROP_DELAYED = "drop_delayed"
    RATE_LIMIT = "rate_limit"
    DROP_BEFORE_COMMIT = "drop_before_commit"
    LANDS_LATE = "lands_late"


# The order random draws walk through; part of the determinism contract, do not reorder.
FAULT_KINDS: tuple[Fault, ...] = tuple(Fault)

# The study's levels (timeout / delayed visibility / partial success / conflict); its "timeout"
# is a request whose effect may have committed: here `drop_after_commit`.
STUDY_LEVELS: dict[str, dict[Fault, float]] = {
    "low": {
        Fault.DROP_AFTER_COMMIT: 0.05,
        Fault.DELAYED_VISIBILITY: 0.05,
        Fault.PARTIAL: 0.03,
        Fault.CONFLICT: 0.02,
    },
    "medium": {
        Fault.DROP_AFTER_COMMIT: 0.20,
        Fault.DELAYED_VISIBILITY: 0.15,
        Fault.PARTIAL: 0.10,
        Fault.CONFLICT: 0.05,
    },
    "high": {
        Fault.DROP_AFTER_COMMIT: 0.35,
        Fault.DELAYED_VISIBILITY: 0.25,
        Fault.PARTIAL: 0.15,
        Fault.CONFLICT: 0.10,
    },
}


def parse_fault(name: str) -> Fault:
    try:
        return Fault(name)
    except ValueError:
        raise ValueError(f"unknown fault kind {name!r}; known: {', '.join(FAULT_KINDS)}") from None


@dataclass(frozen=True)
class FaultPlan:
    """Probability of each fault kind per fresh write (their sum must be <= 1), plus the seed."""

    drop_after_commit: float = 0.0
    error_after_commit: float = 0.0
    slow: float = 0.0
    conflict: float = 0.0
    partial: float = 0.0
    delayed_visibility: float = 0.0
    drop_delayed: float = 0.0
    rate_limit: float = 0.0
    drop_before_commit: float = 0.0
    lands_late: float = 0.0
    seed: int = 0
    slow_seconds: float = 2.0
    # Lag of a `delayed_visibility` effect; None means the simulator's own default.
    visibility_lag: float | None = None
    # The `Retry-After` seconds of a `rate_limit` answer (None: no header) and its status.
    retry_after: float | None = 1.0
    rate_limit_status: int = 429

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            p = self.probability(kind)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"probability of {kind} must be within [0, 1], got {p}")
        if sum(self.probability(k) for k in FAULT_KINDS) > 1.0 + 1e-9:
            raise ValueError("fault probabilities add up to more than 1")
        if self.slow_seconds < 0 or (self.visibility_lag is not None and self.visibility_lag < 0):
            raise ValueError("durations must not be negative")

    def probability(self, kind: Fault) -> float:
        return float(getattr(self, kind.value))

    @classmethod
    def study_level(cls, level: str, *, seed: int = 0, **overrides: Any) -> FaultPlan:
        """The fault mix of the study at `level` ("low", "medium" or "high")."""
        if level not in STUDY_LEVELS:
            raise ValueError(f"unknown level {level!r}; known: {', '.join(STUDY_LEVELS)}")
        values: dict[str, Any] = {k.value: p for k, p in STUDY_LEVELS[level].items()}
        values.update(overrides)
        return cls(seed=seed, **values)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultPlan:
        """Builds a plan from JSON (the `POST /_sim/faults` body); unknown keys are an error.

        `{"level": "medium", ...}` starts from a study level and lets the other keys override it.
        """
        known = {f.name for f in fields(cls)}
        values = dict(data)
        level = values.pop("level", None)
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown fault plan keys: {', '.join(sorted(unknown))}")
        for name, value in values.items():
            if name in ("visibility_lag", "retry_after") and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number")
        if level is not None:
            return cls.study_level(str(level), **values)
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class FaultInjector:
    """Decides the fault of each fresh write: scripted faults first, then seeded random ones."""

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self._script: deque[Fault | None] = deque()
        self.decisions: list[Fault | None] = []
        self.configure(plan or FaultPlan())

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def configure(self, plan: FaultPlan) -> None:
        """Replaces the random plan and restarts its generator from `plan.seed`."""
        self._plan = plan
        self._rng = random.Random(plan.seed)

    def script(self, faults: Iterable[Fault | str | None]) -> None:
        """The next fresh writes take these faults in order (None = no fault for that write)."""
        self._script.extend(None if f is None else parse_fault(str(f)) for f in faults)

    @property
    def scripted(self) -> list[Fault | None]:
        return list(self._script)

    def reset(self) -> None:
        """Clears the script and the decision log, and restarts the random generator."""
        self._script.clear()
        self.decisions.clear()
        self.configure(self._plan)

    def decide(self) -> Fault | None:
        """The fault of the next fresh write (exactly one call per such write)."""
        fault = self._script.popleft() if self._script else self._draw()
        self.decisions.append(fault)
        return fault

    def _draw(self) -> Fault | None:
        # Always draw, even with an all-zero plan, so the sequence depends only on the count.
        u = self._rng.random()
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += self._plan.probability(kind)
            if u < edge:
                return kind
        return None
