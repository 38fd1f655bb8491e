"""The gateway's error hierarchy. The effect protocol raises these; the RPC layer maps each one
to a gRPC status with google.rpc details in one place (rpc/status.py).

Effects are data: a declined card is not an error but a REJECTED action. Errors are for bad
requests, authorisation, policy conflicts and a gateway that cannot persist.
"""

from __future__ import annotations

from collections.abc import Sequence

from effectgate.gateway.model.domain import ActionRecord


class GatewayError(Exception):
    """Base class. `reason` is the stable ErrorInfo reason agents can branch on."""

    reason = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(GatewayError):
    """The request is malformed; `violations` lists (field, description)."""

    reason = "INVALID_REQUEST"

    def __init__(self, violations: Sequence[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {d}" for f, d in violations))
        self.violations = list(violations)


class Unauthenticated(GatewayError):
    """`cause` (missing, malformed, unknown_token) is for the gateway's log and metrics; the
    ErrorInfo reason stays UNAUTHENTICATED."""

    reason = "UNAUTHENTICATED"

    def __init__(self, message: str, cause: str = "missing") -> None:
        super().__init__(message)
        self.cause = cause


class PermissionDenied(GatewayError):
    """`principal`: whom the refusal was for (the gateway's log)."""

    def __init__(self, message: str, reason: str, principal: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.principal = principal


class ActionNotFound(GatewayError):
    reason = "ACTION_NOT_FOUND"

    def __init__(self, action_id: str) -> None:
        super().__init__(f"no action {action_id!r}")
        self.action_id = action_id


class PayloadMismatch(GatewayError):
    """Same logical action, different payload, and the tool's policy refuses it."""

    reason = "PAYLOAD_MISMATCH"

    def __init__(self, record: ActionRecord, fingerprint: str) -> None:
        super().__init__(
            f"action {record.action_id} was first executed with another payload; "
            "use another step_id or scope for a different action"
        )
        self.record = record
        self.stored_fingerprint = record.fingerprint
        self.fingerprint = fingerprint


class AlreadyExecuted(GatewayError):
    """The tool's policy refuses repeats (`on_repeat = "refuse"`)."""

    reason = "ALREADY_EXECUTED"

    def __init__(self, record: ActionRecord) -> None:
        super().__init__(f"action {record.action_id} already ended {record.state.value}")
        self.record = record


class InFlight(GatewayError):
    """Another worker drives the action and it did not settle before the caller's deadline."""

    reason = "IN_FLIGHT"

    def __init__(self, action_id: str, retry_after: float) -> None:
        super().__init__(f"action {action_id} is in flight; retry with the same run context")
        self.action_id = action_id
        self.retry_after = retry_after


class PolicyConflict(GatewayError):
    """An operation the action's state or the tool's policy does not allow."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class DataRefused(GatewayError):
    """The store refused this data for good (a number past its range, a constraint that is not the
    protocol's own): FAILED_PRECONDITION. The same call fails the same way, so it is not an outage
    and a client must not retry it."""

    reason = "DATA_REFUSED"


class RecordTooNew(GatewayError):
    """The action's stored record was written by a newer gateway: its schema version is above the
    versions this gateway reads (a rolling upgrade under way, docs/deploy.md). FAILED_PRECONDITION,
    never a crash: this replica cannot read the action (and so neither answers nor changes it);
    a replica of the newer release can. The same call on this replica fails the same way."""

    reason = "RECORD_VERSION_TOO_NEW"

    def __init__(self, stored_version: str, readable_version: int, action_id: str = "") -> None:
        which = f"action {action_id}" if action_id else "an action"
        super().__init__(
            f"{which} was stored by a newer gateway (record schema version {stored_version}); this gateway"
            f" reads versions up to {readable_version}: ask a replica of the newer release, or finish the upgrade"
        )
        self.stored_version = stored_version
        self.readable_version = readable_version
        self.action_id = action_id


class EventRowBroken(GatewayError):
    """An event row of the audit trail does not decode as the gateway wrote it (edited by hand,
    damaged): DATA_LOSS, naming the row. The same read fails the same way until the row is put
    back; `effectgate audit verify` names every break of the chain."""

    reason = "EVENT_ROW_BROKEN"

    def __init__(self, tenant: str, seq: str, n: str, column: str, problem: str, expected: str, found: str) -> None:
        super().__init__(
            f"event row {seq} (tenant {tenant}, position {n}) cannot be read: {problem}"
            f" (expected {expected}, found {found}); run `effectgate audit verify`"
        )
        self.tenant = tenant
        self.seq = seq
        self.n = n
        self.column = column
        self.problem = problem
        self.expected = expected
        self.found = found


class GatewayUnavailable(GatewayError):
    """The store cannot persist: nothing was sent to the provider."""

    reason = "STORE_UNAVAILABLE"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreFailedAfterSend(GatewayUnavailable):
    """The store failed after a request reached (or may have reached) the provider: the effect may
    exist. The action stays DISPATCHED under its lease and is verified before anything is sent
    again, so calling again with the same run context is safe; a new run context is not."""

    reason = "STORE_UNAVAILABLE_AFTER_SEND"


class ProviderRateLimited(GatewayError):
    """The provider asked for a pause (429/503 with Retry-After) longer than the caller's
    deadline allows. Nothing was sent that took effect: the action is NOT_FOUND, and the next
    Execute with the same run context sends it."""

    reason = "PROVIDER_RATE_LIMITED"

    def __init__(self, action_id: str, retry_after: float) -> None:
        super().__init__(
            f"the provider is rate limiting; action {action_id} was not sent: retry with the same run context"
        )
        self.action_id = action_id
        self.retry_after = retry_after


class ClockSkewed(GatewayUnavailable):
    """This replica's clock is too far from the store's: it claims and sends nothing until the
    skew is back within bound (refused before anything is stored or sent; another replica may
    serve the call at once)."""

    reason = "CLOCK_SKEW"
