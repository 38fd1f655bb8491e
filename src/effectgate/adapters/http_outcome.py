"""Classifying an HTTP write's failure for adapters of APIs without idempotency keys.

The question is always "could the provider have applied the effect?":

- the connection was never made (connect error, connect timeout): no;
- the request left but no answer came (read timeout, reset, malformed answer): maybe;
- an answer came: its status decides, and for a provider that does not dedup on a key only the
  statuses the adapter's provider documents as "refused, nothing applied" are definitive.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import httpx

from effectgate.adapters.base import AdapterError, AmbiguousError, DefinitiveError, NoEffectError
from effectgate.adapters.redact import scrub

# Refusals that say nothing about the payload: authentication, rate limits. Retry later.
NO_EFFECT_STATUSES = frozenset({401, 403, 429})


def transport_error(exc: httpx.HTTPError, what: str) -> AdapterError:
    """The error of a request that got no HTTP answer."""
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
) -> AdapterError:
    """The error of a non-2xx answer. `definitive` lists the statuses that mean "refused, no
    effect" for this provider; anything not known to be harmless is ambiguous."""
    text = f"{what}: HTTP {status}: {scrub(body, secrets)}"
    if status in definitive:
        return DefinitiveError(text, code=f"http_{status}")
    if status in NO_EFFECT_STATUSES:
        return NoEffectError(text, code=f"http_{status}")
    return AmbiguousError(text, code=f"http_{status}")
