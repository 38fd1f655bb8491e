"""What a new action reserves against its tool's limits, and the denials the agent can read.

A reservation is counted in counter rows ("buckets") keyed by (tenant, tool, currency, bucket):
`w:<window start>` for the window's caps, `r:<run id>` for the run's; effects are counted in rows
of currency `*` (every currency), spend in the currency's own rows. The store takes it in the
same transaction as the claim (docs/limits.md); a denial rolls the claim back with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from effectgate.gateway.model.domain import ActionEvent, ActionRecord, State
from effectgate.gateway.model.errors import AlreadyExecuted, GatewayError, GatewayUnavailable

# The largest any counter, cap or counted amount may be (2^62): counters are signed 64-bit
# columns, and two values at most this large sum without overflow. The config refuses a larger
# cap; a counted amount past it, or a reservation that would take a counter past it (a limit
# grant's included), is BUDGET_EXCEEDED with the figures (docs/limits.md).
MAX_COUNT = 1 << 62

# States whose attempt holds nothing: nothing took effect (REJECTED) or absence is proven
# (NOT_FOUND). A write into one releases the reservation; a dispatch out of NOT_FOUND takes it
# again. A state meaning "denied" or "expired" belongs here too.
UNCOUNTED: frozenset[State] = frozenset({State.REJECTED, State.NOT_FOUND})


@dataclass(frozen=True)
class Bucket:
    currency: str
    key: str
    # What the reservation adds to `spent` here (0 in an effects-only row).
    amount: int
    # What the bucket may hold after this reservation; a cap of None is not checked.
    max_effects: int | None
    max_spent: int | None
    # Which configured limit each cap is, for the denial ("max_effects", "run_budget", ...).
    effects_limit: str
    spent_limit: str
    # When the window ends (store clock); None for a run's bucket.
    resets_at: float | None = None


@dataclass(frozen=True)
class Reservation:
    tenant: str
    tool: str
    currency: str
    # The action's amount (0 when no budget is set), for the denial's figures.
    amount: int
    # In lock order (sorted): concurrent reservers never wait on each other in a cycle.
    buckets: tuple[Bucket, ...] = field(default=())
    # Counted without a check: a bypass generation, or an operator's limit grant.
    forced: bool = False
    # When it is taken (the protocol's clock, the store's on PostgreSQL).
    at: float = 0.0

    def ordered(self) -> Reservation:
        return dataclasses.replace(self, buckets=tuple(sorted(self.buckets, key=lambda b: (b.currency, b.key))))


# (currency, bucket) -> (effects, spent): the counters an approval rule reads.
Counters = Mapping[tuple[str, str], tuple[int, int]]


@dataclass(frozen=True)
class Ruling:
    """An approval rule that reads the tool's counters, decided in the claim's transaction, after
    its reservation took the counters' row locks: `holds` gets the counters named by `keys` as
    they stood before this claim's reservation. When it holds, `held` (the same action, waiting
    for a person) and `held_event` are written instead of the claim's record and entry. So
    concurrent claims see each other's sums, as the same claims one at a time would."""

    keys: tuple[tuple[str, str], ...]
    holds: Callable[[Counters], bool]
    held: ActionRecord
    held_event: ActionEvent | None = None


@dataclass(frozen=True)
class LimitUse:
    """One cap of a tool for one tenant: how much of it is used now."""

    limit: str  # max_effects, budget, run_max_effects, run_budget
    currency: str  # the budget's currency; "" for effects
    cap: int
    used: int
    run_id: str = ""

    @property
    def left(self) -> int:
        return max(self.cap - self.used, 0)


@dataclass(frozen=True)
class ToolUsage:
    """A tool's caps for one tenant, in the current window (`[start, end)`, the protocol's clock)."""

    tool: str
    window_start: float
    window_end: float
    limits: tuple[LimitUse, ...]


@dataclass(frozen=True)
class LimitGrant:
    """An operator's leave for one action id to pass its tool's limits once (docs/limits.md): the
    next reservation of that action a limit would refuse is counted without the check."""

    action_id: str
    tenant: str
    principal: str
    note: str
    granted_at: float
    expires_at: float


class LimitExceeded(GatewayError):
    """A new action does not fit its tool's limits: nothing was stored or sent.
    `figures` (ErrorInfo metadata) say which limit, what is used and what is left."""

    def __init__(self, message: str, figures: dict[str, str], retry_after: float | None = None) -> None:
        super().__init__(message)
        self.figures = figures
        self.retry_after = retry_after


class BudgetExceeded(LimitExceeded):
    reason = "BUDGET_EXCEEDED"


class RateLimited(LimitExceeded):
    reason = "RATE_LIMITED"


class ScopeTaken(AlreadyExecuted):
    """`unique = "scope"`, `on_unique = "refuse"`: another logical action (another run or step)
    already holds the scope; the error carries that action."""

    reason = "SCOPE_TAKEN"

    def __init__(self, record: ActionRecord) -> None:
        super().__init__(record)
        self.message = (
            f"tool {record.tool!r} allows one effect per scope and scope {record.scope!r} already has action "
            f"{record.action_id} ({record.state.value}, run {record.run_id!r}, step {record.step_id!r}); "
            "nothing was sent"
        )
        self.args = (self.message,)


class CircuitOpen(GatewayUnavailable):
    """The tool's provider failed too often: new sends are refused until the cool-down ends."""

    reason = "CIRCUIT_OPEN"

    def __init__(self, tool: str, retry_after: float) -> None:
        super().__init__(
            f"tool {tool!r}: its provider failed too often; new actions are refused for {retry_after:.1f}s "
            "(nothing was stored or sent); call again later with the same run context",
            retry_after=retry_after,
        )
        self.tool = tool
