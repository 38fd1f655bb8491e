"""Classifying an HTTP write's failure, for every adapter that speaks HTTP.

The question is always "could the provider have applied the effect?":

- the connection was never made (connect error, connect timeout): no;
- the request left but no answer came (read timeout, reset, malformed answer): maybe;
- an answer came: its status decides. 429, and 503 with `Retry-After`, are refusals before
  acting that ask for a pause (`RateLimited`); 401/403 and a 429 without a usable `Retry-After`
  are refusals to retry later (`NoEffectError`); for a provider that does not dedup on a key only
  the statuses the adapter's provider documents as "refused, nothing applied" are definitive;
  anything else is ambiguous.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from effectgate.adapters.base import (
    AdapterError,
    AmbiguousError,
    CredentialsRefused,
    DefinitiveError,
    NoEffectError,
    RateLimited,
)
from effectgate.adapters.redact import scrub

if TYPE_CHECKING:  # httpx is loaded by the adapters that speak HTTP, not by `effectgate.adapters`
    import httpx

# Refusals that say nothing about the payload: authentication, rate limits. Retry later.
NO_EFFECT_STATUSES = frozenset({401, 403, 429})
# A provider asking for longer than this is capped: the driver still bounds the wait by the
# caller's deadline, and an absurd header must not park an action for days.
MAX_RETRY_AFTER = 300.0


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delta-seconds or an HTTP date), capped to
    [0, MAX_RETRY_AFTER]; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """A header's value looked up without regard to case (SDKs hand plain dicts over)."""
    if not headers:
        return None
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


def rate_limit(status: int, headers: Mapping[str, str] | None, what: str) -> NoEffectError | None:
    """The refusal of a 429 (with or without `Retry-After`) or a 503 with `Retry-After`; else None."""
    if status not in (429, 503):
        return None
    pause = retry_after(header(headers, "Retry-After"))
    code = "rate_limited" if status == 429 else "unavailable"
    if pause is not None:
        return RateLimited(
            f"{what}: HTTP {status}, asked to retry after {pause:g} s; nothing was applied",
            retry_after=pause,
            code=code,
            details={"http_status": status, "retry_after": pause},
        )
    if status == 429:
        return NoEffectError(f"{what}: HTTP 429 (rate limited); nothing was applied", code=code)
    return None


def transport_error(exc: httpx.HTTPError, what: str) -> AdapterError:
    """The error of a request that got no HTTP answer."""
    import httpx  # already loaded: `exc` is one of its errors

    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return NoEffectError(f"{what}: could not connect ({name}); nothing was sent", code="connect")
    return AmbiguousError(f"{what}: no answer ({name}); the effect may have happened", code="no_answer")


def status_error(
    status: int,
    body: str,
    what: str,
    *,
    definitive: Collection[int],
    secrets: Iterable[str] = (),
    headers: Mapping[str, str] | None = None,
) -> AdapterError:
    """The error of a non-2xx answer. `definitive` lists the statuses that mean "refused, no
    effect" for this provider; anything not known to be harmless is ambiguous. The body is
    scrubbed of `secrets` before it is cut to size."""
    limited = rate_limit(status, headers, what)
    if limited is not None:
        return limited
    text = f"{what}: HTTP {status}: {scrub(body, secrets)}"
    if status in definitive:
        return DefinitiveError(text, code=f"http_{status}")
    if status in (401, 403):
        return CredentialsRefused(text, code=f"http_{status}")
    if status in NO_EFFECT_STATUSES:
        return NoEffectError(text, code=f"http_{status}")
    return AmbiguousError(text, code=f"http_{status}")
