"""The adapter conformance suite: the execute/verify contract every adapter must keep.

An adapter package proves itself by describing how to drive it against its provider simulator
(a `ConformanceTarget`) and running every check of `CHECKS` (pytest: parametrise over
`CHECKS` and await `check(target)`). Each check is one claim the gateway relies on:

- `one_execute_one_effect`: a clean execute is one effect at the provider, and verify agrees;
- `lost_response_is_verified`: after a response lost once the provider committed, execute raises
  `AmbiguousError` (never a receipt, never "no effect"), and verify confirms the effect without a
  second one (or answers UNKNOWN when the adapter declares no read API);
- `not_found_is_not_absence`: before a delayed write becomes readable, verify answers NOT_FOUND
  (never CONFIRMED early), and the declared consistency window covers the delay;
- `definitive_refusal`: a payload the provider refuses raises `DefinitiveError`, with no effect;
- `partial_never_confirmed`: a half-applied effect is never CONFIRMED by verify, and execute
  does not return a receipt for it unless the provider's reply cannot show it;
- `rate_limit_is_no_effect`: a provider's rate-limit refusal (429/503, or an SMTP 451) raises
  `NoEffectError` (a `RateLimited` carrying the pause when the provider names one), applies
  nothing, and the same call afterwards makes exactly one effect;
- `no_secret_leaks`: the provider secret (a canary) appears in no error, observation or repr,
  including when the provider rejects the credentials;
- and the fault checks of `conformance_faults`: a 5xx after the write, a write slower than the
  attempt (`keeps_processing`), a write the provider applies after its caller gave up, a 409,
  and a resend with the key of an adapter that dedups on it.

The simulator's secret must be the target's `canary`, so every check also scans its errors and
observations for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from effectgate.adapters.base import (
    AmbiguousError,
    DefinitiveError,
    NoEffectError,
    Outcome,
    RateLimited,
    Receipt,
)
from effectgate.adapters.conformance_faults import (
    conflict_is_not_a_refusal,
    error_after_commit_is_ambiguous,
    key_dedups_a_resend,
    late_write_is_never_absent_early,
    slow_write_is_ambiguous,
)
from effectgate.adapters.conformance_kit import (
    ConformanceTarget,
    assert_no_secret,
    assert_verified,
    attempt,
    new_call,
    tag,
)

__all__ = ["CHECKS", "Check", "ConformanceTarget", "new_call"]


async def one_execute_one_effect(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        receipt = await adapter.execute(call)
        assert isinstance(receipt, Receipt) and receipt.external_id
        assert await target.effects() == before + 1
        obs = await adapter.verify(call)
        assert_verified(adapter, obs, Outcome.CONFIRMED, "after a clean execute")
        assert await target.effects() == before + 1, "verify must not write"
        assert_no_secret(target, receipt, obs)
    finally:
        await adapter.close()


async def lost_response_is_verified(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("drop_after_commit")
        outcome = await attempt(adapter, call)
        assert isinstance(outcome, AmbiguousError), f"a lost response must be ambiguous, got {outcome!r}"
        assert await target.effects() == before + 1
        obs = await adapter.verify(call)
        assert_verified(adapter, obs, Outcome.CONFIRMED, "after a lost response")
        # The proof replaces a second send: still exactly one effect.
        assert await target.effects() == before + 1
        assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def not_found_is_not_absence(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        window = adapter.capabilities.consistency_window
        assert window >= target.visibility_lag, (
            f"the declared consistency window ({window:g} s) must cover the provider's visibility lag"
            f" ({target.visibility_lag:g} s): a NOT_FOUND inside the lag is taken for absence and sent again"
        )
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("delayed_visibility")
        outcome = await attempt(adapter, call)
        early = await adapter.verify(call)
        assert_verified(adapter, early, Outcome.NOT_FOUND, "before the write is visible")
        await asyncio.sleep(target.visibility_lag + 0.2)
        late = await adapter.verify(call)
        assert_verified(adapter, late, Outcome.CONFIRMED, "after the lag")
        assert_no_secret(target, outcome, early, late)
    finally:
        await adapter.close()


async def definitive_refusal(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.refused_payload(tag()))
        outcome = await attempt(adapter, call)
        assert isinstance(outcome, DefinitiveError), f"expected DefinitiveError, got {outcome!r}"
        assert await target.effects() == before
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED, f"a refused action verified CONFIRMED: {obs}"
        assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def partial_never_confirmed(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("partial")
        outcome = await attempt(adapter, call)
        if not target.partial_hidden_in_reply:
            assert not isinstance(outcome, Receipt), f"a receipt for a partial effect: {outcome}"
            assert not isinstance(outcome, DefinitiveError), "a partial effect is not 'no effect'"
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED, f"a partial effect verified CONFIRMED: {obs}"
        assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def rate_limit_is_no_effect(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("rate_limit")
        refused = await attempt(adapter, call)
        assert isinstance(refused, NoEffectError), f"a rate-limit refusal must be NoEffectError, got {refused!r}"
        if target.retry_after is not None:
            assert isinstance(refused, RateLimited), (
                f"the provider named a pause (Retry-After: {target.retry_after:g}), but the refusal is {refused!r}:"
                " a RateLimited carrying it makes the gateway wait instead of retrying in a burst"
            )
            assert abs(refused.retry_after - target.retry_after) < 0.01, (
                f"Retry-After said {target.retry_after:g} s, the RateLimited carries {refused.retry_after:g} s"
            )
        assert await target.effects() == before, "a rate-limited request applied an effect"
        again = await attempt(adapter, call)
        assert isinstance(again, Receipt), f"the same call after the refusal failed: {again!r}"
        assert await target.effects() == before + 1
        assert_no_secret(target, refused, again)
    finally:
        await adapter.close()


async def no_secret_leaks(target: ConformanceTarget) -> None:
    # A wrong secret that contains the canary: the provider refuses it, and the refusal (which
    # providers like to echo) must not carry it into errors, observations or reprs.
    wrong = f"x{target.canary}x"
    adapter = await target.build(wrong)
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        outcome = await attempt(adapter, call)
        assert not isinstance(outcome, Receipt), "the provider accepted a wrong secret"
        assert await target.effects() == before
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED
        assert_no_secret(target, outcome, obs, adapter, adapter.capabilities)
    finally:
        await adapter.close()
    good = await target.build()
    try:
        assert_no_secret(target, good)
    finally:
        await good.close()


Check = Callable[[ConformanceTarget], Awaitable[None]]
CHECKS: dict[str, Check] = {
    "one_execute_one_effect": one_execute_one_effect,
    "lost_response_is_verified": lost_response_is_verified,
    "not_found_is_not_absence": not_found_is_not_absence,
    "error_after_commit_is_ambiguous": error_after_commit_is_ambiguous,
    "slow_write_is_ambiguous": slow_write_is_ambiguous,
    "late_write_is_never_absent_early": late_write_is_never_absent_early,
    "conflict_is_not_a_refusal": conflict_is_not_a_refusal,
    "key_dedups_a_resend": key_dedups_a_resend,
    "definitive_refusal": definitive_refusal,
    "partial_never_confirmed": partial_never_confirmed,
    "rate_limit_is_no_effect": rate_limit_is_no_effect,
    "no_secret_leaks": no_secret_leaks,
}
