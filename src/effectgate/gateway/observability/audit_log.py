"""The audit trail (logger `effectgate.audit`): one line per operator act and per refused caller,
with ids, states, who and the operator's note; never payloads, secrets, tokens or provider error
text. The line of a settled action is made on the call's path (`calls.settled`), with the same
fields (`calls.action_fields`) and the caller admission set (`calls.set_caller`). The lines'
format (text or JSON with trace ids) is `logging_setup`'s.
"""

from __future__ import annotations

import time

from effectgate.gateway.model import ActionRecord
from effectgate.gateway.observability import metrics, telemetry
from effectgate.gateway.observability.calls import action_fields, audit


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
        extra={"event": "operator_act", "act": act, "operator": who, "note": note, **action_fields(record)},
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
