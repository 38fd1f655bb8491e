"""effectgate client: async and sync clients, typed errors and the run-context helper. The
generated stubs (effectgate.v1, effectgate.tools.v1) come from the effectgate-protos distribution."""

from effectgate.client.client import EffectGateClient
from effectgate.client.context import RunContext, current, run, stable_step_id, step, subagent
from effectgate.client.errors import (
    AlreadyExecuted,
    BudgetExceeded,
    CircuitOpen,
    DeadlineExceeded,
    EffectGateError,
    InFlight,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    PayloadMismatch,
    PermissionDenied,
    PolicyConflict,
    RateLimited,
    RecordTooNew,
    ScopeTaken,
    Unauthenticated,
    Unavailable,
)
from effectgate.client.retry import RetryPolicy
from effectgate.client.states import NextStep, State
from effectgate.client.sync import SyncEffectGateClient

__all__ = [
    "AlreadyExecuted",
    "BudgetExceeded",
    "CircuitOpen",
    "DeadlineExceeded",
    "EffectGateClient",
    "EffectGateError",
    "InFlight",
    "InvalidRequest",
    "LimitExceeded",
    "NextStep",
    "NotFound",
    "PayloadMismatch",
    "PermissionDenied",
    "PolicyConflict",
    "RateLimited",
    "RecordTooNew",
    "RetryPolicy",
    "RunContext",
    "ScopeTaken",
    "State",
    "SyncEffectGateClient",
    "Unauthenticated",
    "Unavailable",
    "current",
    "run",
    "stable_step_id",
    "step",
    "subagent",
]
