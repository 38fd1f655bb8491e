"""The harness's vocabulary: what an agent was told, what the provider recorded, one episode."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field

LEVELS = ("low", "medium", "high")
METHODS = ("direct", "wrapper", "effectgate")
BEHAVIOURS = ("replan", "approval_twice", "subagents")

# The simulated world runs on a compressed clock: lags and waits are fractions of a second.
VISIBILITY_LAG = 0.3  # a delayed write shows in reads this much later
SETTLE_SECONDS = 0.4  # the missing half of a partial (non-atomic) write lands this much later
CONSISTENCY_WINDOW = 1.2  # effectgate's window: generously above the lag, as it must be
MAX_REPLANS = 2  # an agent loop makes at most 1 + MAX_REPLANS tool calls
HTTP_TIMEOUT = 2.0


class Told(enum.Enum):
    """What the agent reported to its user."""

    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Truth:
    """Ground truth read from a simulator once every lag has passed."""

    effects: int  # writes the provider applied for this request (partial ones included)
    complete: int  # of those, effects that are whole at the end


@dataclass(frozen=True)
class Episode:
    """One user request: everything about it is drawn from its seed, identically for every method."""

    seed: int
    level: str
    scenario: str
    behaviour: str
    paraphrase: bool  # the model rewrites the arguments when it re-plans
    bucket_phase: float  # where the wrapper's time buckets fall relative to the episode start
    stagger: float  # with --crash, when the request arrives (0-2 s), so kills land amid the traffic

    @classmethod
    def draw(cls, seed: int, level: str, scenario: str, behaviours: tuple[str, ...]) -> Episode:
        rng = random.Random(f"episode:{seed}")  # not the level or scenario: paired across cells
        # Most runs are one agent re-planning; a share resume twice or split into subagents.
        weights = {"replan": 3.0, "approval_twice": 1.0, "subagents": 1.0}
        chosen = rng.choices(behaviours, [weights[b] for b in behaviours])[0]
        return cls(seed, level, scenario, chosen, rng.random() < 0.5, rng.random(), 2 * rng.random())

    @property
    def run_id(self) -> str:
        return f"run-{self.scenario}-{self.level}-{self.seed}"


@dataclass
class Result:
    method: str
    episode: Episode
    told: Told = Told.UNKNOWN  # when the faults stopped
    told_final: Told = Told.UNKNOWN  # after the faults stopped and a reconciler could run
    latency: float = 0.0
    truth: Truth = Truth(0, 0)
    calls: int = 0  # tool calls the agent made
    notes: list[str] = field(default_factory=list)

    @property
    def duplicate(self) -> bool:
        return self.truth.effects > 1

    @property
    def success(self) -> bool:
        return self.told_final is Told.SUCCESS and self.truth.effects == 1 and self.truth.complete == 1

    @property
    def false_success(self) -> bool:
        return self.told_final is Told.SUCCESS and self.truth.complete == 0

    @property
    def false_failure(self) -> bool:
        return self.told_final is Told.FAILURE and self.truth.effects > 0

    def to_json(self) -> dict[str, object]:
        e = self.episode
        return {
            "method": self.method,
            "level": e.level,
            "scenario": e.scenario,
            "seed": e.seed,
            "behaviour": e.behaviour,
            "paraphrase": e.paraphrase,
            "told": self.told.value,
            "told_final": self.told_final.value,
            "effects": self.truth.effects,
            "complete_effects": self.truth.complete,
            "success": self.success,
            "duplicate": self.duplicate,
            "false_success": self.false_success,
            "false_failure": self.false_failure,
            "latency": round(self.latency, 4),
            "calls": self.calls,
            "notes": self.notes,
        }
