"""Logging for the gateway process: levels, text or JSON lines, provider SDK noise off, and no
secret in any record.

`RedactingFilter` sits on every handler of the root logger, so it sees the records of every
library (stripe, httpx, grpc…) after they are formatted: each configured secret the adapters
resolved, bearer-looking tokens, provider API keys and passwords in URLs become `***`.
`--log-format json` makes every record one JSON object with the current trace_id and span_id, so
a line leads to its trace and back; audit fields (`extra=`) become keys.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import trace

from effectgate.adapters.secrets import TRANSPORT_LOGGERS, resolved_secrets

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Provider SDKs log request URLs (with payload values) and provider error text at INFO: the
# adapters' transport loggers, and the other libraries that log a line per request or query.
NOISY_LOGGERS = (*TRANSPORT_LOGGERS, "hpack", "urllib3", "aiosmtplib", "asyncpg")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
_TOKENISH = re.compile(r"(?i)\b(bearer|basic|token)(\s+|=|:\s*)[A-Za-z0-9._~+/=-]{8,}")
_API_KEY = re.compile(r"\b(sk|rk|pk|whsec)_(live|test)_[A-Za-z0-9]{6,}")
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@")
# Shorter "secrets" would blank ordinary words out of every line.
MIN_SECRET_LENGTH = 6


def mask_url(url: str) -> str:
    """`postgresql://user:pw@host/db` -> `postgresql://user:***@host/db`."""
    return _URL_PASSWORD.sub(r"\1***@", url)


def redact(text: str, secrets: Iterable[str]) -> str:
    # Longest first, so a secret containing another is replaced whole.
    for secret in sorted((s for s in secrets if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _TOKENISH.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    text = _API_KEY.sub(lambda m: f"{m.group(1)}_{m.group(2)}_***", text)
    return mask_url(text)


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: Callable[[], Iterable[str]] = resolved_secrets) -> None:
        super().__init__()
        self._secrets = secrets
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = tuple(self._secrets())
        record.msg = redact(record.getMessage(), secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        for key, value in _extra(record).items():  # audit fields, e.g. an operator's note
            if isinstance(value, str):
                setattr(record, key, redact(value, secrets))
        return True


def _extra(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a caller passed with `extra=` (audit lines)."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


def _trace_ids() -> dict[str, str]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the `extra` fields and the trace
    context of the code that logged."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_extra(record),
            **_trace_ids(),
        }
        if record.exc_info:
            doc["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(doc, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """The classic line, with `key=value` for audit fields and the trace id when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = {**_extra(record), **_trace_ids()}
        return super().format(record) + "".join(f" {k}={json.dumps(v, default=str)}" for k, v in fields.items())


def setup_logging(level: str, fmt: str = "text") -> None:
    """One root handler on stderr at `level` (`text` or `json` lines), provider SDKs at WARNING,
    redaction on every handler."""
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
