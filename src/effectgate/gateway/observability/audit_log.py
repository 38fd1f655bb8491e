"""The audit trail (logger `effectgate.audit`): one line per settled action, per operator act and
per refused caller, with ids, states, who and the operator's note; never payloads, secrets,
tokens or provider error text. The lines' format (text or JSON with trace ids) is
`logging_setup`'s.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from effectgate.gateway.config import Principal
from effectgate.gateway.model import REPORTED, ActionRecord
from effectgate.gateway.observability import metrics, telemetry

audit = logging.getLogger("effectgate.audit")

# The authenticated caller of the RPC being handled (set by the RPC layer's admission); unset in
# the gateway's own background work (the reconciler), whose lines name no principal.
_caller: contextvars.ContextVar[Principal] = contextvars.ContextVar("effectgate_principal")
# The context variable's own methods, not functions around them: every RPC sets its caller and
# most read it, and neither needs a Python frame. `caller()` raises LookupError outside an RPC.
set_caller: Callable[[Principal], contextvars.Token[Principal]] = _caller.set
caller: Callable[[], Principal] = _caller.get


def scope_digest(scope: str) -> str:
    """What the audit lines say of a scope: it may hold a customer's id, which the logs never
    carry. `printf %s 'customer:cus_42' | sha256sum | cut -c1-16` finds one scope's lines."""
    return hashlib.sha256(scope.encode()).hexdigest()[:16]


def _action_fields(record: ActionRecord) -> dict[str, Any]:
    # No receipt ids: a provider's id may be a payload value (the http adapter's receipt_id).
    found = _caller.get(None)
    return {
        "action_id": record.action_id,
        "principal": found.name if found is not None else "",
        "tenant": record.tenant,
        "run_id": record.run_id,
        "step_id": record.step_id,
        "agent": record.agent,
        "tool": record.tool,
        "scope_sha256": scope_digest(record.scope),
        "state": record.state.value,
        "attempts": record.attempts,
        "next_step": record.next_step.value,
    }


def settled(record: ActionRecord) -> ActionRecord:
    """One line when a drive stops with an outcome to report (`domain.REPORTED`); returns the record."""
    if record.state in REPORTED:
        span = trace.get_current_span()
        if span.is_recording():  # the RPC's or the reconciler's span, when tracing
            telemetry.describe(span, record)
        if not audit.isEnabledFor(logging.INFO):  # the fields are not built for a line not written
            return record
        audit.info(
            "action %s %s",
            record.action_id,
            record.state.value,
            extra={"event": "action_settled", **_action_fields(record)},
        )
    return record


def operator_act(act: str, who: str, note: str, record: ActionRecord) -> ActionRecord:
    """One line per operator act (verify, approve, reconcile, grant_bypass): who did what to which
    action, with the note; the RPC span gets the action's ids and a link to its first trace."""
    telemetry.annotate_current(record)
    metrics.operator_act(act)
    audit.info(
        "%s %s by %s",
        act,
        record.action_id,
        who,
        extra={"event": "operator_act", "act": act, "operator": who, "note": note, **_action_fields(record)},
    )
    return record


class _Bucket:
    """At most `burst` lines at once and `rate` a second after that: a caller hammering the port
    with bad tokens is counted in full but cannot flood the log."""

    def __init__(self, rate: float = 10.0, burst: float = 20.0) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()
        self.suppressed = 0

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            self.suppressed += 1
            return False
        self.tokens -= 1.0
        return True


_refusals = _Bucket()


def auth_failed(cause: str, method: str, peer: str, principal: str = "") -> None:
    """A caller refused before its handler ran: no token (`missing`), not `Bearer <token>`
    (`malformed`), a token no principal has (`unknown_token`), or a principal without the role or
    tool (`role_required`, `tool_not_allowed`). Counted always; logged (WARNING, never the token)
    unless a flood is being shed, when the next line says how many were not written."""
    metrics.auth_failure(cause, method)
    if not _refusals.take():
        return
    suppressed, _refusals.suppressed = _refusals.suppressed, 0
    audit.warning(
        "refused %s: %s from %s",
        method,
        cause,
        peer,
        extra={
            "event": "auth_failed",
            "cause": cause,
            "method": method,
            "peer": peer,
            "principal": principal,
            "suppressed": suppressed,
        },
    )
