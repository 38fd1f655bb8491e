"""Square's wire: the idempotency key and reference id it takes, its error shape, its times.

Square's `idempotency_key` is at most 45 characters and `reference_id` at most 40: the key is a
hash of the gateway's provider key (so a bypass generation still gets a new one), the reference
is the action id itself (36 characters) for the first generation and `<action id>-g<N>` for the
N-th operator-granted bypass (`reference_id`): the read-back matches on it, so a bypass is never
confirmed by an earlier generation's payment. An error answer is `{"errors": [{category, code,
detail, field}]}`; messages are built from Square's enumerations only (category and code),
never from `detail`, which is free text.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Any

from effectgate.adapters.base import AdapterError, AmbiguousError, CredentialsRefused, DefinitiveError, NoEffectError
from effectgate.adapters.http_outcome import rate_limit

_SAFE = re.compile(r"[A-Z0-9_]{1,64}")
_SAFE_ID = re.compile(r"[A-Za-z0-9_\-]{1,192}")
# Refused before acting; a retry later is safe.
_NO_EFFECT = frozenset({"AUTHENTICATION_ERROR", "RATE_LIMIT_ERROR"})
# The key was used with other parameters, or is in use: an earlier request may have moved money.
_MAYBE = frozenset({"IDEMPOTENCY_KEY_REUSED", "CONFLICT"})


def idempotency_key(provider_key: str) -> str:
    return "eg-" + hashlib.sha256(provider_key.encode()).hexdigest()[:40]


REFERENCE_LIMIT = 40
_GENERATION_SUFFIX = re.compile(r"-g([1-9][0-9]*)$")


def reference_id(action_id: str, generation: int) -> str:
    """The `reference_id` of the action's `generation`: the action id (cut to Square's 40 for
    generation 0, as before generations had their own), `<action id>-g<N>` after the N-th bypass;
    "" when that does not fit in 40 characters (a gateway action id fits up to generation 99)."""
    if generation == 0:
        return action_id[:REFERENCE_LIMIT]
    reference = f"{action_id}-g{generation}"
    return reference if len(reference) <= REFERENCE_LIMIT else ""


def action_of_reference(reference: str) -> str:
    """The action id a `reference_id` names, whichever generation wrote it."""
    return _GENERATION_SUFFIX.sub("", reference)


def safe_id(value: object) -> str:
    text = "" if value is None else str(value)
    return text if _SAFE_ID.fullmatch(text) else ""


def _enum(value: object) -> str:
    text = "" if value is None else str(value)
    return text if _SAFE.fullmatch(text) else ""


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp(text: object) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # not a time, or one out of the platform's range
        return 0.0


def first_error(body: Any) -> tuple[str, str]:
    """(category, code) of an error answer ("" when absent or not Square's enumerations)."""
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        return _enum(errors[0].get("category")), _enum(errors[0].get("code"))
    return "", ""


def classify(status: int, body: Any, headers: Any, what: str) -> AdapterError:
    """The error of a non-2xx answer: refused (nothing happened), no effect yet, or maybe."""
    category, code = first_error(body)
    details: dict[str, Any] = {"http_status": status, "category": category, "code": code}
    limited = rate_limit(status, headers, what)
    if limited is not None:
        limited.details.update(details)
        return limited
    name = code.lower() or f"http_{status}"
    if code in _MAYBE or status == 409:
        return AmbiguousError(f"{what}: {code or 'conflict'}; an earlier effect may exist", code=name, details=details)
    if status in (401, 403) or category == "AUTHENTICATION_ERROR":
        return CredentialsRefused(f"{what}: credentials refused ({name})", code=name, details=details)
    if category in _NO_EFFECT:
        return NoEffectError(f"{what}: refused before acting ({name}); retry later", code=name, details=details)
    if status < 500 and category in ("PAYMENT_METHOD_ERROR", "INVALID_REQUEST_ERROR"):
        return DefinitiveError(f"{what}: refused ({category.lower()}: {name})", code=name, details=details)
    if status in (400, 402, 404):
        return DefinitiveError(f"{what}: refused ({name})", code=name, details=details)
    return AmbiguousError(f"{what}: provider error ({name}); the effect may have happened", code=name, details=details)
