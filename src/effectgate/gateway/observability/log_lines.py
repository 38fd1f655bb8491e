"""One log line: secrets redacted from its text, and the JSON shape every JSON line has.

Shared by the logging handlers (logging_setup.py) and the stderr pump (native_stderr.py), which
both write lines and neither of which the other needs.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
