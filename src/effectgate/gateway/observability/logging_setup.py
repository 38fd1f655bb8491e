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
import os
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from effectgate.adapters.secrets import TRANSPORT_LOGGERS, resolved_secrets

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Provider SDKs log request URLs (with payload values) and provider error text at INFO: the
# adapters' transport loggers, and the other libraries that log a line per request or query.
NOISY_LOGGERS = (*TRANSPORT_LOGGERS, "hpack", "urllib3", "aiosmtplib", "asyncpg")
_encode_string: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_TOKENISH = re.compile(r"(?i)\b(bearer|basic|token)(\s+|=|:\s*)[A-Za-z0-9._~+/=-]{8,}")
_API_KEY = re.compile(r"\b(sk|rk|pk|whsec)_(live|test)_[A-Za-z0-9]{6,}")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@")
# Whether any of the three can match: one search instead of three substitutions on the text most
# lines are made of (ids, states, names), which none of them matches.
_ANY_PATTERN = re.compile(
    r"(?i:\b(?:bearer|basic|token)(?:\s+|=|:\s*)[A-Za-z0-9._~+/=-]{8,})"
    r"|\b(?:sk|rk|pk|whsec)_(?:live|test)_[A-Za-z0-9]{6,}"
    r"|\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:[^@\s/]+@"
)
# Shorter "secrets" would blank ordinary words out of every line.
MIN_SECRET_LENGTH = 6
_ordered: tuple[object, tuple[str, ...]] = (None, ())


def mask_url(url: str) -> str:
    """`postgresql://user:pw@host/db` -> `postgresql://user:***@host/db`."""
    return _URL_PASSWORD.sub(r"\1***@", url)


def _longest_first(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets worth replacing, longest first (so a secret containing another is replaced
    whole); the last answer is kept for the same set (`resolved_secrets` returns one frozenset
    until a secret is added)."""
    global _ordered
    if isinstance(secrets, frozenset) and _ordered[0] is secrets:
        return _ordered[1]
    ordered = tuple(sorted((s for s in secrets if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True))
    if isinstance(secrets, frozenset):
        _ordered = (secrets, ordered)
    return ordered


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in _longest_first(secrets):
        text = text.replace(secret, "***")
    if _ANY_PATTERN.search(text) is None:
        return text
    text = _TOKENISH.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    text = _API_KEY.sub(lambda m: f"{m.group(1)}_{m.group(2)}_***", text)
    return mask_url(text)


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


# OpenTelemetry log data model: SeverityNumber of each Python level (TRACE 1-4, DEBUG 5-8, ...).
SEVERITY_NUMBERS = {"DEBUG": 5, "INFO": 9, "WARNING": 13, "ERROR": 17, "CRITICAL": 21}


@dataclass
class Identity:
    """The resource fields every JSON line carries (`setup_logging`, then `identify`)."""

    service_name: str = "effectgate"
    instance_id: str = ""


IDENTITY = Identity()


def new_instance_id() -> str:
    """`host-pid-random`: unique per process, and readable (which host, which process)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def identify(service_name: str, instance_id: str = "") -> None:
    """Names the service (OTEL_SERVICE_NAME wins, as for the telemetry resource) and the instance."""
    IDENTITY.service_name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    if instance_id:
        IDENTITY.instance_id = instance_id


def _timestamp(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def json_line(body: str, level: str, scope: str, created: float, attributes: dict[str, Any] | None = None) -> str:
    """One log line as JSON, its keys named after the OpenTelemetry log data model (`timestamp`,
    `severity_text`, `severity_number`, `body`, `trace_id`, `span_id`), the resource's
    `service.name` and `service.instance.id`, the logger as `scope.name`, attributes flat."""
    doc: dict[str, Any] = {
        "timestamp": _timestamp(created),
        "severity_text": level,
        "severity_number": SEVERITY_NUMBERS.get(level, 9),
        "body": body,
        "scope.name": scope,
        "service.name": IDENTITY.service_name,
        "service.instance.id": IDENTITY.instance_id,
        **(attributes or {}),
    }
    return json.dumps(doc, default=str, separators=(",", ":"))


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
        from effectgate.gateway.observability.native_stderr import capture_stderr

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
