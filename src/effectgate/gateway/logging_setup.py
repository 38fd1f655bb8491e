"""Logging for the gateway process: levels, provider SDK noise off, and no secret in any record.

`RedactingFilter` sits on every handler of the root logger, so it sees the records of every
library (stripe, httpx, grpc…) after they are formatted: each configured secret the adapters
resolved, bearer-looking tokens, provider API keys and passwords in URLs become `***`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from effectgate.adapters.secrets import resolved_secrets

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Provider SDKs log request URLs (with payload values) and provider error text at INFO.
NOISY_LOGGERS = ("stripe", "httpx", "httpcore", "aiosmtplib", "asyncpg")
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
        return True


def setup_logging(level: str) -> None:
    """Root handler at `level`, provider SDKs at WARNING, redaction on every handler."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    install_redaction()


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Adds the filter to every handler of `logger` (root by default) that lacks one."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
