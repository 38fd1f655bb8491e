"""Logging for the gateway process: levels, text or JSON lines, provider SDK noise off, and no
secret in any record.

`RedactingFilter` sits on every handler of the root logger, so it sees the records of every
library (stripe, httpx, grpc…) after they are formatted: each configured secret the adapters
resolved, bearer-looking tokens, provider API keys and passwords in URLs become `***`.
`--log-format json` makes every record one JSON object with the current trace_id and span_id, so
a line leads to its trace and back; audit fields (`extra=`) become keys; the keys follow the
OpenTelemetry log data model (docs/observability.md).
"""

from __future__ import annotations

import json
import json.encoder
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import trace

from effectgate.adapters.secrets import TRANSPORT_LOGGERS, resolved_secrets
from effectgate.gateway.observability.log_lines import (
    IDENTITY,
    identify,
    json_line,
    new_instance_id,
    redact,
)
from effectgate.gateway.observability.native_stderr import capture_stderr

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Provider SDKs log request URLs (with payload values) and provider error text at INFO: the
# adapters' transport loggers, and the other libraries that log a line per request or query.
NOISY_LOGGERS = (*TRANSPORT_LOGGERS, "hpack", "urllib3", "aiosmtplib", "asyncpg")
_encode_string: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Callable[[], Iterable[str]] = resolved_secrets) -> None:
        super().__init__()
        self._secrets = secrets
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets()
        record.msg = redact(record.getMessage(), secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        for key, value in extra_fields(record).items():  # audit fields, e.g. an operator's note
            if isinstance(value, str):
                setattr(record, key, redact(value, secrets))
        return True


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with `extra=` (audit lines)."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _trace_ids() -> dict[str, str]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line (`json_line`): the `extra` fields and the trace context of the
    code that logged become attributes."""

    def format(self, record: logging.LogRecord) -> str:
        attributes = {**extra_fields(record), **_trace_ids()}
        if record.exc_info:
            attributes["exception.stacktrace"] = record.exc_text or self.formatException(record.exc_info)
        return json_line(record.getMessage(), record.levelname, record.name, record.created, attributes)


class TextFormatter(logging.Formatter):
    """The classic line, with `key=value` for audit fields and the trace id when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = {**extra_fields(record), **_trace_ids()}
        return super().format(record) + "".join(f" {k}={_json_value(v)}" for k, v in fields.items())


def _json_value(value: object) -> str:
    """`json.dumps(value, default=str)`; a string (most fields) by the encoder json.dumps itself
    calls for one, without building an encoder per value."""
    if type(value) is str:
        return _encode_string(value)
    return json.dumps(value, default=str)


def setup_logging(level: str, fmt: str = "text") -> None:
    """One root handler on stderr at `level` (`text` or `json` lines), provider SDKs at WARNING,
    redaction on every handler. JSON: every other line written to stderr (gRPC's C core, a
    library's print) is turned into a JSON line too (native_stderr.py)."""
    if not IDENTITY.instance_id:
        IDENTITY.instance_id = new_instance_id()
    identify(IDENTITY.service_name)
    if fmt == "json":
        capture_stderr()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    provider_sdk_logs(False)
    install_redaction()


def provider_sdk_logs(on: bool) -> None:
    """Provider SDK request lines (with URLs) are off unless `[telemetry] provider_sdk_logs`."""
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if on else logging.WARNING)


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Adds the filter to every handler of `logger` (root by default) that lacks one."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
