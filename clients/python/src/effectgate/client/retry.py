"""Opt-in retries for the cases where calling again cannot make a second effect.

An Execute is keyed by (run, step, tool, scope), not by the call: calling again with the same
context is the same action, so the gateway answers with the stored outcome or keeps driving the
one it has. The client retries only where the gateway said nothing was decided:
UNAVAILABLE (nothing was sent: the store could not persist, the provider rate-limited, the
gateway was unreachable; or STORE_UNAVAILABLE_AFTER_SEND: something may have been sent, and the
gateway verifies the action before any re-send, so the same context is still safe) and
ABORTED/IN_FLIGHT (another call drives the action). It waits what
RetryInfo asks, else a capped exponential back-off, within a total budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from effectgate.client.errors import EffectGateError


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    # Used when the error carries no RetryInfo: initial, doubling up to max_backoff.
    initial_backoff: float = 0.2
    max_backoff: float = 5.0
    # No retry would start later than this many seconds after the first attempt.
    total_budget: float = 60.0

    def delay(self, error: EffectGateError, attempt: int, elapsed: float) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None: do not retry."""
        if attempt >= self.max_attempts or not retryable(error):
            return None
        wait = error.retry_after
        if wait is None:
            wait = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1))
        if elapsed + wait > self.total_budget:
            return None
        return max(wait, 0.0)


def retryable(error: EffectGateError) -> bool:
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    return code == grpc.StatusCode.ABORTED and error.reason == "IN_FLIGHT"


def as_policy(retry: RetryPolicy | bool | None) -> RetryPolicy | None:
    if retry is True:
        return RetryPolicy()
    if retry is False or retry is None:
        return None
    return retry
