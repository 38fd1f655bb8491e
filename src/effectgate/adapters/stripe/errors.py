"""Every Stripe SDK failure becomes an adapter error here (`classify`), with a message built from
Stripe's codes only: Stripe's own messages can echo part of the API key."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any, TypeVar

import aiohttp
import stripe

from effectgate.adapters.base import AdapterError, AmbiguousError, CredentialsRefused, DefinitiveError, NoEffectError
from effectgate.adapters.http_outcome import rate_limit
from effectgate.adapters.redact import scrub_json
from effectgate.adapters.secrets import resolved_secrets

_SAFE_CODE = re.compile(r"[a-z0-9_]{1,64}")
_SAFE_ID = re.compile(r"[A-Za-z0-9_]{1,128}")
T = TypeVar("T")

__all__ = ["_code", "_guard", "_id", "classify"]


def _code(value: object, default: str, pattern: re.Pattern[str] = _SAFE_CODE) -> str:
    """A provider code fit for a message: Stripe's enumerations only, never free text."""
    text = str(value) if value else ""
    return text if pattern.fullmatch(text) else default


def _id(value: object) -> str:
    return _code(value, "unparsable", _SAFE_ID)


def classify(exc: Exception, what: str) -> AdapterError:
    """The one place an SDK failure becomes an adapter error (no effect / refused / maybe)."""
    if isinstance(exc, stripe.StripeError):
        err = exc.error
        status = exc.http_status
        code = _code(exc.code or (err.code if err else None), "")
        details: dict[str, Any] = {"http_status": status}
        if exc.request_id:
            details["request_id"] = _id(exc.request_id)
        if isinstance(exc, stripe.CardError):
            details["decline_code"] = _code(err.decline_code if err else None, "")
            if err and err.payment_intent is not None:
                details["payment_intent"] = _id(err.payment_intent.id)
            code = code or "card_error"
            return DefinitiveError(f"{what}: card refused ({code})", code=code, details=details)
        if isinstance(exc, stripe.IdempotencyError):
            # The key was used before with other parameters: that earlier request may have moved money.
            msg = f"{what}: idempotency key reused with other parameters; an earlier effect may exist"
            return AmbiguousError(msg, code="idempotency_error", details=details)
        limited = rate_limit(status or 0, exc.headers, what)
        if limited is not None:
            limited.details.update(details)
            return limited
        if isinstance(exc, stripe.AuthenticationError | stripe.PermissionError):
            code = code or {401: "authentication_failed", 403: "permission_denied"}.get(status or 0, "")
            code = code or "authentication_failed"
            return CredentialsRefused(f"{what}: credentials refused ({code})", code=code, details=details)
        if isinstance(exc, stripe.RateLimitError):
            code = code or {401: "authentication_failed", 403: "permission_denied"}.get(status or 0, "rate_limited")
            return NoEffectError(f"{what}: refused before acting ({code}); retry later", code=code, details=details)
        if isinstance(exc, stripe.InvalidRequestError):
            details["param"] = _code(exc.param, "")
            code = code or "invalid_request"
            return DefinitiveError(f"{what}: invalid request ({code})", code=code, details=details)
        if isinstance(exc, stripe.APIConnectionError):
            cause = exc.__cause__
            # Raised only while a connection is being opened: the request never left.
            if isinstance(cause, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
                return NoEffectError(f"{what}: could not connect; nothing was sent", code="connect")
            if isinstance(cause, TimeoutError):
                return AmbiguousError(f"{what}: timed out; the effect may have happened", code="timeout")
            return AmbiguousError(f"{what}: connection lost; the effect may have happened", code="connection_lost")
        # 409 (key in use, lock timeout), 5xx and anything unexpected: the outcome is unknown.
        code = code or (f"http_{status}" if status else "stripe_error")
        return AmbiguousError(
            f"{what}: provider error ({code}); the effect may have happened", code=code, details=details
        )
    if isinstance(exc, TimeoutError):  # the answer's body did not arrive in time
        return AmbiguousError(f"{what}: timed out; the effect may have happened", code="timeout")
    if isinstance(exc, aiohttp.ClientError):  # the connection broke while the answer was read
        return AmbiguousError(f"{what}: connection lost; the effect may have happened", code="connection_lost")
    return AmbiguousError(f"{what}: unexpected {type(exc).__name__}", code="unexpected")


async def _guard(awaitable: Awaitable[T], what: str) -> T:
    try:
        return await awaitable
    except Exception as exc:
        mapped = classify(exc, what)
        mapped.details = scrub_json(mapped.details, resolved_secrets())
    # Raised outside the except block so the SDK error (its body, its message) is not chained.
    raise mapped
