"""The audit trail: one line per settled action and per operator act (logger `effectgate.audit`),
with ids, states, who and the operator's note; never payloads, secrets or provider error text.
The lines' format (text or JSON with trace ids) is `logging_setup`'s.
"""

from __future__ import annotations

import logging
from typing import Any

from effectgate.gateway.model import REPORTED, ActionRecord
from effectgate.gateway.observability import metrics, telemetry

audit = logging.getLogger("effectgate.audit")


def _action_fields(record: ActionRecord) -> dict[str, Any]:
    # No receipt ids: a provider's id may be a payload value (the http adapter's receipt_id).
    return {
        "action_id": record.action_id,
        "tenant": record.tenant,
        "tool": record.tool,
        "state": record.state.value,
        "attempts": record.attempts,
        "next_step": record.next_step.value,
    }


def settled(record: ActionRecord) -> ActionRecord:
    """One line when a drive stops with an outcome to report (`domain.REPORTED`); returns the record."""
    if record.state in REPORTED:
        telemetry.annotate_current(record)
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
