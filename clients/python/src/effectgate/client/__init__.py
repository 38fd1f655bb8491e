"""effectgate client: async and sync clients, typed errors and the run-context helper. The
generated stubs (effectgate.v1, effectgate.tools.v1) come from the effectgate-protos distribution.

The names below are loaded on first use (PEP 562): a program that needs one part of the package
(the gateway reads `money_text` and `states` from it) does not pay for the clients' imports."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# The module that defines each public name: the errors module, but for these.
_HOME = dict.fromkeys(__all__, "errors") | {
    "EffectGateClient": "client",
    "SyncEffectGateClient": "sync",
    "RetryPolicy": "retry",
    "NextStep": "states",
    "State": "states",
    **dict.fromkeys(("RunContext", "current", "run", "stable_step_id", "step", "subagent"), "context"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
