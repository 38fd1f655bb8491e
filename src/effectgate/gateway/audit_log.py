"""Logs people can search: an audit line per settled action and per operator act, JSON on demand.

`configure_logging(level, "json")` makes every log record one JSON object with the current
trace_id and span_id, so a line leads to its trace and back. Audit lines (logger
`effectgate.audit`) carry ids, states, who and the operator's note; never payloads, secrets or
provider error text. Provider SDK loggers (stripe, httpx, httpcore) log a line per request with
its URL: they are held at WARNING unless asked for.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import trace

from effectgate.gateway import metrics, telemetry
from effectgate.gateway.domain import ActionRecord, State

audit = logging.getLogger("effectgate.audit")
NOISY_LOGGERS = ("stripe", "httpx", "httpcore", "hpack", "urllib3", "aiosqlite", "asyncpg")
SETTLED = (State.CONFIRMED, State.REJECTED, State.UNKNOWN, State.NOT_FOUND)
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _trace_ids() -> dict[str, str]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the record's `extra` fields and
    the trace context of the code that logged."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")})
        doc.update(_trace_ids())
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """The classic line, with `key=value` for audit fields and the trace id when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        fields.update(_trace_ids())
        return line + "".join(f" {k}={json.dumps(v, default=str)}" for k, v in fields.items())


def configure_logging(level: str, fmt: str = "text", *, provider_sdk_logs: bool = False) -> None:
    """The root handler on stderr in `text` or `json`; provider SDK loggers quiet by default."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet_provider_sdks(not provider_sdk_logs)


def quiet_provider_sdks(quiet: bool = True) -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)


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
    """One line when a drive leaves the action settled (or UNKNOWN); returns the record."""
    if record.state in SETTLED:
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
