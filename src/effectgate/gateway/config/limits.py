"""A tool's limits (`[tools.NAME.limits]`) and circuit breaker (`[tools.NAME.breaker]`).

Counted per tenant and tool (docs/limits.md): effects and spend per fixed window of the store's
clock, effects and spend per run, bounds on the payload, one live effect per scope, and approval
rules. Amounts are integers in the payload's own unit (minor units for money).
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from effectgate.gateway.config.durations import Duration
from effectgate.gateway.model import MAX_COUNT

# The largest cap (and max_amount) accepted: 2^62, so that counters never overflow 64 bits.
MAX_CAP = MAX_COUNT


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Unique(enum.Enum):
    # The action id is (tenant, run, step, tool, scope), as everywhere.
    NONE = "none"
    # The action id is (tenant, tool, scope): one live effect per business object.
    SCOPE = "scope"


class OnUnique(enum.Enum):
    # A second logical action on the scope gets the first one's outcome.
    COALESCE = "coalesce"
    # ... or ALREADY_EXISTS naming the first one.
    REFUSE = "refuse"


Cap = int


class ToolLimits(_Table):
    # The payload's integer field summed by `budget` and bounded by `max_amount`.
    amount_field: str = "amount"
    # The payload's field naming the currency ("" for a budget that has no currency: key "").
    currency_field: str = "currency"
    # The fixed window of `max_effects` and `budget`, aligned on the store's clock.
    window: Duration = 3600.0
    # Effects per tenant and tool per window (None: no cap).
    max_effects: Cap | None = Field(default=None, ge=0, le=MAX_CAP)
    # Spend per currency per tenant and tool per window, in the amount's unit.
    budget: dict[str, Cap] = {}
    # Per run (tenant, tool, run id): effects and spend over the run's life.
    run_max_effects: Cap | None = Field(default=None, ge=0, le=MAX_CAP)
    run_budget: dict[str, Cap] = {}
    # Payload bounds, refused INVALID_ARGUMENT before anything is stored.
    max_amount: Cap | None = Field(default=None, ge=0, le=MAX_CAP)
    scope: str = "optional"
    no_bidi: tuple[str, ...] = ()
    unique: Unique = Unique.NONE
    on_unique: OnUnique = OnUnique.COALESCE
    # CEL rules over the payload, the budget left and the run: any true holds the action for approval.
    require_approval_when: tuple[str, ...] = ()

    @field_validator("budget", "run_budget")
    @classmethod
    def _caps(cls, value: dict[str, int]) -> dict[str, int]:
        seen: dict[str, str] = {}
        for currency, cap in value.items():
            if not 0 <= cap <= MAX_CAP:
                raise ValueError(f"{currency}: a budget must be between 0 and {MAX_CAP}")
            # Currencies are compared without case (the payload's is lowered): two keys for one
            # currency would leave one of them silently unused.
            first = seen.setdefault(currency.lower(), currency)
            if first != currency:
                raise ValueError(f"{first!r} and {currency!r} are one currency (keys are compared without case)")
        return {currency.lower(): cap for currency, cap in value.items()}

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        if value not in ("optional", "required"):
            raise ValueError("must be 'optional' or 'required'")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: float) -> float:
        if value < 1.0:
            raise ValueError("a limit window must be at least 1s")
        return value

    @property
    def counted(self) -> bool:
        """Whether new actions reserve anything (some cap is set)."""
        return bool(self.max_effects is not None or self.budget or self.run_max_effects is not None or self.run_budget)


class BreakerConfig(_Table):
    # Provider errors (lost answers, 5xx, timeouts, refusals before acting) within `window` that open it.
    failures: int = Field(default=5, ge=1)
    window: Duration = 30.0
    # How long an open breaker refuses new sends before it lets one probe through.
    cooldown: Duration = 30.0
