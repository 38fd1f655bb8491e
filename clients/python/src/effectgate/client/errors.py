"""Typed errors of the gateway's error contract, decoded from google.rpc.Status details.

Every error the gateway sends carries `google.rpc.ErrorInfo` with a stable `reason`; some add
`RetryInfo` (when a retry makes sense) or `BadRequest` (which fields are wrong). The classes below
subclass `grpc.aio.AioRpcError`, so code that catches gRPC errors keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from effectgate.v1 import gateway_pb2

_EMPTY = grpc.aio.Metadata()


class EffectGateError(grpc.aio.AioRpcError):
    """A gRPC error from the gateway. `reason` and `metadata` come from ErrorInfo ("" and {}
    when the error did not come from the gateway, e.g. a connection failure)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        trailing_metadata: grpc.aio.Metadata = _EMPTY,
    ) -> None:
        super().__init__(code, _EMPTY, trailing_metadata, message, None)
        self.message = message
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.retry_after = retry_after

    @property
    def action_id(self) -> str:
        return self.metadata.get("action_id", "")

    def __str__(self) -> str:
        reason = f" ({self.reason})" if self.reason else ""
        return f"{self.code().name}{reason}: {self.message}"

    __repr__ = __str__


class InvalidRequest(EffectGateError):
    """INVALID_ARGUMENT: fix the request; `field_violations` lists (field, description)."""

    field_violations: list[tuple[str, str]] = []


class Unauthenticated(EffectGateError):
    """UNAUTHENTICATED: no token, or a token the gateway does not know."""


class PermissionDenied(EffectGateError):
    """PERMISSION_DENIED: the principal lacks the role or the tool (reason says which)."""


class NotFound(EffectGateError):
    """NOT_FOUND: no such action (for this tenant)."""


class PayloadMismatch(EffectGateError):
    """FAILED_PRECONDITION/PAYLOAD_MISMATCH: the same logical action was first executed with
    another payload. A different action needs another step or scope."""

    @property
    def stored_fingerprint(self) -> str:
        return self.metadata.get("stored_fingerprint", "")

    @property
    def fingerprint(self) -> str:
        return self.metadata.get("fingerprint", "")


class PolicyConflict(EffectGateError):
    """FAILED_PRECONDITION for another reason (e.g. BYPASS_NOT_GRANTED, NOT_UNKNOWN)."""


class RecordTooNew(PolicyConflict):
    """FAILED_PRECONDITION/RECORD_VERSION_TOO_NEW: a newer gateway release stored this action (a
    rolling upgrade under way); this replica cannot read it. Nothing was changed. A replica of the
    newer release answers it; `stored_version` and `readable_version` say which record versions."""

    @property
    def stored_version(self) -> str:
        return self.metadata.get("stored_version", "")

    @property
    def readable_version(self) -> str:
        return self.metadata.get("readable_version", "")


class AlreadyExecuted(EffectGateError):
    """ALREADY_EXISTS/ALREADY_EXECUTED: the tool refuses repeats; `action` is the stored one."""

    action: gateway_pb2.Action | None = None


class InFlight(EffectGateError):
    """ABORTED/IN_FLIGHT: another call drives this action; call again after `retry_after`."""


class Unavailable(EffectGateError):
    """UNAVAILABLE: nothing was sent (the store cannot persist, the provider rate-limits, or the
    gateway is unreachable); call again after `retry_after` with the same run context. Reason
    STORE_UNAVAILABLE_AFTER_SEND: the store failed after the send, the effect may exist; the same
    run context is still safe (the action is verified before any re-send), a new one is not."""


class LimitExceeded(EffectGateError):
    """RESOURCE_EXHAUSTED from a limit (gRPC's own RESOURCE_EXHAUSTED, e.g. a message too large,
    stays an EffectGateError): a limit of the tool refused a new action; nothing was stored or sent.
    `metadata` holds the figures: `limit` (which one), `budget`, `spent`, `left`, `amount`,
    `currency`, `max_effects`, `effects`, `window_resets_at`."""

    @property
    def limit(self) -> str:
        return self.metadata.get("limit", "")

    @property
    def left(self) -> int | None:
        value = self.metadata.get("left", "")
        return int(value) if value.lstrip("-").isdigit() else None


class BudgetExceeded(LimitExceeded):
    """RESOURCE_EXHAUSTED/BUDGET_EXCEEDED: the amount does not fit what is left of the budget
    (of the window or of the run). A retry does not help before the window resets."""


class RateLimited(LimitExceeded):
    """RESOURCE_EXHAUSTED/RATE_LIMITED: the tool's effects per window are used up; call again
    after `retry_after` (the window's end)."""


class ScopeTaken(AlreadyExecuted):
    """ALREADY_EXISTS/SCOPE_TAKEN: the tool allows one effect per scope and another run or step
    holds it; `action` is that action."""


class CircuitOpen(Unavailable):
    """UNAVAILABLE/CIRCUIT_OPEN: the tool's provider failed too often; new actions are refused
    until `retry_after` (replays still answer)."""


class DeadlineExceeded(EffectGateError):
    """DEADLINE_EXCEEDED: the outcome is not known yet; the same call later returns it."""


_BY_CODE: dict[grpc.StatusCode, type[EffectGateError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: PolicyConflict,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExecuted,
    grpc.StatusCode.ABORTED: InFlight,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}
_BY_REASON: dict[str, type[EffectGateError]] = {
    "PAYLOAD_MISMATCH": PayloadMismatch,
    "BUDGET_EXCEEDED": BudgetExceeded,
    "RATE_LIMITED": RateLimited,
    "SCOPE_TAKEN": ScopeTaken,
    "CIRCUIT_OPEN": CircuitOpen,
    "RECORD_VERSION_TOO_NEW": RecordTooNew,
}


def _unpack(
    details: Sequence[any_pb2.Any],
) -> tuple[
    error_details_pb2.ErrorInfo | None,
    error_details_pb2.RetryInfo | None,
    error_details_pb2.BadRequest | None,
    gateway_pb2.Action | None,
]:
    info = retry = bad = action = None
    for detail in details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
        elif detail.Is(gateway_pb2.Action.DESCRIPTOR):
            action = gateway_pb2.Action()
            detail.Unpack(action)
    return info, retry, bad, action


def _status(error: grpc.RpcError) -> status_pb2.Status | None:
    try:
        found: status_pb2.Status | None = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:  # the status and the details disagree: ignore the details
        return None
    return found


def _pairs(metadata: Iterable[Any]) -> list[tuple[str, str | bytes]]:
    # Sync errors give _Metadatum named tuples, async ones plain tuples: both unpack alike.
    return [(str(key), value) for key, value in metadata]


def from_rpc_error(error: grpc.RpcError) -> EffectGateError:
    """The typed error for a gRPC error raised by a generated stub (sync or async)."""
    if isinstance(error, EffectGateError):
        return error
    code: grpc.StatusCode = error.code()
    message: str = error.details() or ""
    trailing = error.trailing_metadata() or ()
    status = _status(error)
    info, retry, bad, action = _unpack(status.details if status is not None else ())
    reason = info.reason if info is not None else ""
    kind = _BY_REASON.get(reason) or _BY_CODE.get(code, EffectGateError)
    retry_after = retry.retry_delay.ToTimedelta().total_seconds() if retry is not None else None
    typed = kind(
        code,
        message,
        reason=reason,
        metadata=dict(info.metadata) if info is not None else {},
        retry_after=retry_after,
        trailing_metadata=grpc.aio.Metadata(*_pairs(trailing)),
    )
    if isinstance(typed, InvalidRequest):
        typed.field_violations = [(v.field, v.description) for v in bad.field_violations] if bad else []
    if isinstance(typed, AlreadyExecuted):
        typed.action = action
    return typed
