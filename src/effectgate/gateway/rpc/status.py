"""The one place where gateway errors (and a transition the action's state refuses) become gRPC
statuses with google.rpc details."""

from __future__ import annotations

import math

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from effectgate.gateway.core import IllegalTransition
from effectgate.gateway.model import (
    ActionNotFound,
    AlreadyExecuted,
    DataRefused,
    EventRowBroken,
    GatewayError,
    GatewayUnavailable,
    InFlight,
    InvalidRequest,
    LimitExceeded,
    PayloadMismatch,
    PermissionDenied,
    PolicyConflict,
    ProviderRateLimited,
    RecordTooNew,
    Unauthenticated,
)
from effectgate.gateway.rpc.wire import action_pb

DOMAIN = "effectgate.dev"

CODES: list[tuple[type[GatewayError], int]] = [
    (InvalidRequest, code_pb2.INVALID_ARGUMENT),
    (Unauthenticated, code_pb2.UNAUTHENTICATED),
    (PermissionDenied, code_pb2.PERMISSION_DENIED),
    (ActionNotFound, code_pb2.NOT_FOUND),
    (PayloadMismatch, code_pb2.FAILED_PRECONDITION),
    (AlreadyExecuted, code_pb2.ALREADY_EXISTS),
    (InFlight, code_pb2.ABORTED),
    (PolicyConflict, code_pb2.FAILED_PRECONDITION),
    (DataRefused, code_pb2.FAILED_PRECONDITION),
    (RecordTooNew, code_pb2.FAILED_PRECONDITION),
    (EventRowBroken, code_pb2.DATA_LOSS),
    (GatewayUnavailable, code_pb2.UNAVAILABLE),
    (ProviderRateLimited, code_pb2.UNAVAILABLE),
    (LimitExceeded, code_pb2.RESOURCE_EXHAUSTED),
]
# What a handler may raise that becomes a status here (anything else is INTERNAL, rpc/admission.py).
ANSWERED = (GatewayError, IllegalTransition)


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def _retry_info(seconds: float) -> error_details_pb2.RetryInfo:
    whole = math.floor(seconds)
    return error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))
    )


def to_status(error: GatewayError | IllegalTransition) -> grpc.Status:
    if isinstance(error, IllegalTransition):
        return _illegal_transition(error)
    code = next((c for kind, c in CODES if isinstance(error, kind)), code_pb2.INTERNAL)
    metadata: dict[str, str] = {}
    details: list[any_pb2.Any] = []
    if isinstance(error, InvalidRequest):
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in error.violations
                    ]
                )
            )
        )
    if isinstance(error, PayloadMismatch):
        metadata = {
            "action_id": error.record.action_id,
            "stored_fingerprint": error.stored_fingerprint,
            "fingerprint": error.fingerprint,
        }
    if isinstance(error, AlreadyExecuted):
        metadata = {"action_id": error.record.action_id, "state": error.record.state.value}
        details.append(_pack(action_pb(error.record)))
    if isinstance(error, InFlight):
        metadata = {"action_id": error.action_id}
        details.append(_pack(_retry_info(error.retry_after)))
    if isinstance(error, ActionNotFound):
        metadata = {"action_id": error.action_id}
    if isinstance(error, RecordTooNew):
        metadata = {
            "action_id": error.action_id,
            "stored_version": error.stored_version,
            "readable_version": str(error.readable_version),
        }
    if isinstance(error, EventRowBroken):
        metadata = {
            "tenant": error.tenant,
            "seq": error.seq,
            "position": error.n,
            "column": error.column,
            "problem": error.problem,
        }
    if isinstance(error, GatewayUnavailable):
        details.append(_pack(_retry_info(error.retry_after)))
    if isinstance(error, ProviderRateLimited):
        metadata = {"action_id": error.action_id}
        details.append(_pack(_retry_info(error.retry_after)))
    if isinstance(error, LimitExceeded):
        metadata = dict(error.figures)
        if error.retry_after is not None:
            details.append(_pack(_retry_info(error.retry_after)))
    details.insert(0, _pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata)))
    status = status_pb2.Status(code=code, message=error.message, details=details)
    return rpc_status.to_status(status)


def _illegal_transition(error: IllegalTransition) -> grpc.Status:
    """The action's state refuses the event (it changed under a caller that checked too early):
    FAILED_PRECONDITION, naming the state and the event."""
    state = "" if error.state is None else error.state.value
    info = error_details_pb2.ErrorInfo(
        reason="ILLEGAL_TRANSITION", domain=DOMAIN, metadata={"state": state, "event": error.event}
    )
    status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(error), details=[_pack(info)])
    return rpc_status.to_status(status)
