"""The data every wing shares: the action record and its states, keys, the protocol's errors."""

from __future__ import annotations

from effectgate.gateway.model.domain import (
    DUE,
    IN_DOUBT,
    RECOVERABLE,
    REPORTED,
    TERMINAL,
    UNSENT,
    ActionIdentity,
    ActionRecord,
    ListQuery,
    NextStep,
    Page,
    State,
)
from effectgate.gateway.model.errors import (
    ActionNotFound,
    AlreadyExecuted,
    ClockSkewed,
    GatewayError,
    GatewayUnavailable,
    InFlight,
    InvalidRequest,
    PayloadMismatch,
    PermissionDenied,
    PolicyConflict,
    ProviderRateLimited,
    StoreFailedAfterSend,
    Unauthenticated,
)
from effectgate.gateway.model.keys import provider_key

__all__ = [
    "DUE",
    "IN_DOUBT",
    "RECOVERABLE",
    "REPORTED",
    "TERMINAL",
    "UNSENT",
    "ActionIdentity",
    "ActionNotFound",
    "ActionRecord",
    "AlreadyExecuted",
    "ClockSkewed",
    "GatewayError",
    "GatewayUnavailable",
    "InFlight",
    "InvalidRequest",
    "ListQuery",
    "NextStep",
    "Page",
    "PayloadMismatch",
    "PermissionDenied",
    "PolicyConflict",
    "ProviderRateLimited",
    "State",
    "StoreFailedAfterSend",
    "Unauthenticated",
    "provider_key",
]
