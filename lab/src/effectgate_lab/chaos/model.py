"""The harness's vocabulary: what an agent was told, what the provider recorded, one episode."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field

LEVELS = ("low", "medium", "high")
METHODS = (
    "baseline",
    "retries_only",
    "idempotency_only",
    "wrapper",
    "stable_key",
    "restate",
    "dbos_sqlite",
    "dbos_postgres",
    "effectgate",
)
# The durable-execution engines teams pick instead (methods/engines.py).
ENGINES = ("restate", "dbos_sqlite", "dbos_postgres")
# The simulators whose writes dedup on an Idempotency-Key (Stripe-like); the CRM has none.
KEYED = frozenset({"charge_card"})
# The fault families the engines' table pools the parts into (each split by KEYED), and what
# `--family-episodes` sizes (runner.at_least); the parts of effectgate's settings are in none.
FAMILIES = {
    "headline": "study faults",
    "keyed": "study faults",
    "behaviours": "re-plans, resumes, approvals, subagents",
    "partial_finishing": "first write half-done",
    "partial_stuck": "first write half-done",
    "timeout_after_commit": "first write's answer lost",
    "timeout_after_commit_unseen": "first write's answer lost",
    "timeout_before_commit": "first write's request lost",
    "sweep": "wait below and above the lag",
}
# `single` is the study's setting; the others are orchestration behaviours the study never ran.
BEHAVIOURS = (
    "single",
    "replan_paraphrase",
    "resume",
    "approval_twice",
    "subagents_same_step",
    "subagents_diff_step",
)

# The simulated world runs on a compressed clock. One provider lag (`--lag`): a delayed write
# shows in reads, and a half-done write finishes, this long after it commits. Every method is told
# the lag and derives its wait (or window) as margin x lag, the same way (`Run.wait`); MARGIN is
# the default margin, the sweep varies it.
DEFAULT_LAG = 0.3
MARGIN = 1.5
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


def stream_seed(scenario: str, level: str, seed: int) -> int:
    """The fault stream of one (scenario, level, seed): independent across all three, shared by
    every method and behaviour (so methods, and behaviours against `single`, are paired)."""
    digest = hashlib.sha256(f"faults:{scenario}:{level}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class Episode:
    """One user request; everything about it is fixed by its coordinates, identically per method."""

    part: str  # which table it belongs to (headline, behaviours, sweep, ...)
    seed: int
    level: str
    scenario: str
    behaviour: str
    margin: float = MARGIN
    bucket_phase: float = 0.0  # where the wrapper's time buckets fall relative to the start
    stagger: float = 0.0  # with --crash, when the request arrives, so kills land amid traffic

    @classmethod
    def draw(cls, part: str, seed: int, level: str, scenario: str, behaviour: str, margin: float) -> Episode:
        digest = hashlib.sha256(f"episode:{scenario}:{level}:{seed}".encode()).digest()
        phase, stagger = digest[0] / 256, 2 * digest[1] / 256
        return cls(part, seed, level, scenario, behaviour, margin, phase, stagger)

    @property
    def fault_seed(self) -> int:
        return stream_seed(self.scenario, self.level, self.seed)

    @property
    def run_id(self) -> str:
        return f"run-{self.part}-{self.scenario}-{self.level}-{self.behaviour}-{self.margin}-{self.seed}"


@dataclass
class Result:
    method: str
    episode: Episode
    told: Told = Told.UNKNOWN  # when the faults stopped (the agents' answer)
    told_final: Told = Told.UNKNOWN  # after every method's own read path ran once more
    latency: float = 0.0  # request to the agents' answer
    definite_after: float | None = None  # request to the first definite answer (None: never)
    truth: Truth = Truth(0, 0)
    calls: int = 0  # tool calls the agents made
    first_fault: str = "none"  # the fault of the episode's first provider write
    effects_faults_off: int = 0  # effects from writes made after the faults stopped
    notes: list[str] = field(default_factory=list)

    @property
    def whole_once(self) -> bool:
        return self.truth.effects == 1 and self.truth.complete == 1

    @property
    def duplicate(self) -> bool:
        return self.truth.effects > 1

    @property
    def success_at_stop(self) -> bool:
        return self.told is Told.SUCCESS and self.whole_once

    @property
    def success(self) -> bool:
        return self.told_final is Told.SUCCESS and self.whole_once

    @property
    def false_success(self) -> bool:
        return self.told_final is Told.SUCCESS and self.truth.complete == 0

    @property
    def false_failure(self) -> bool:
        return self.told_final is Told.FAILURE and self.truth.complete > 0

    @property
    def unknown_final(self) -> bool:
        return self.told_final is Told.UNKNOWN
