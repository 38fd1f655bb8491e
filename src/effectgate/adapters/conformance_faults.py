"""The conformance checks of the faults that turn a misclassification into a duplicate.

Each is one line of docs/writing-an-adapter.md's error table, proven against the simulator:

- `error_after_commit_is_ambiguous`: a 5xx answer to a write the provider applied is
  `AmbiguousError` (never `DefinitiveError`: that records "no effect" where money moved), and
  verify confirms the one effect;
- `slow_write_is_ambiguous`: a write whose answer comes later than the attempt's timeout is
  `AmbiguousError`, lands, and is confirmed without a second effect; the adapter's
  `keeps_processing` covers how late the provider answers, so a `NOT_FOUND` read before the
  write lands is never taken for absence;
- `late_write_is_never_absent_early`: a write the provider applies `slow_seconds` after it
  arrived, whatever the caller does (the `lands_late` fault: the caller timed out first), is
  `AmbiguousError`, lands once and is confirmed; every moment verify still answered NOT_FOUND lies
  inside `keeps_processing`, so the gateway never takes that NOT_FOUND for absence and sends again;
- `conflict_is_not_a_refusal`: a 409 (the provider's "key in use", nothing applied) is
  `AmbiguousError` (`NoEffectError` where the protocol's answer proves nothing was applied, as
  SMTP's 451 does), never a refusal or a receipt, applies nothing, is never `CONFIRMED`, and the
  same call then makes one effect;
- `key_dedups_a_resend`: an adapter that declares `dedups_on_key` sends `call.provider_key` as the
  provider's idempotency key: a resend after a lost answer makes no second effect.
"""

from __future__ import annotations

import asyncio
import time

from effectgate.adapters.base import AmbiguousError, DefinitiveError, NoEffectError, Outcome, Receipt
from effectgate.adapters.conformance_kit import (
    ConformanceTarget,
    assert_no_secret,
    assert_verified,
    attempt,
    effects_reach,
    new_call,
    tag,
)


async def error_after_commit_is_ambiguous(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("error_after_commit")
        outcome = await attempt(adapter, call)
        refused = isinstance(outcome, DefinitiveError)
        why = ": a DefinitiveError records 'no effect' where it happened" if refused else ""
        assert isinstance(outcome, AmbiguousError), (
            f"a 5xx after the write must be ambiguous (the provider may have applied it), got {outcome!r}{why}"
        )
        assert await target.effects() == before + 1
        obs = await adapter.verify(call)
        assert_verified(adapter, obs, Outcome.CONFIRMED, "after a 5xx answer to an applied write")
        assert await target.effects() == before + 1, "verify must not write"
        assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def slow_write_is_ambiguous(target: ConformanceTarget) -> None:
    adapter = await target.build()
    impatient = await target.build(timeout=target.slow_seconds / 3)
    try:
        kept = adapter.capabilities.keeps_processing
        assert kept >= target.slow_seconds, (
            f"keeps_processing ({kept:g} s) is shorter than the provider's slow answers ({target.slow_seconds:g} s):"
            " a NOT_FOUND read while the provider still applies the write would be taken for absence"
            " and the action sent twice"
        )
        before = await target.effects()
        call = new_call(impatient, target.good_payload(tag()))
        target.inject("slow")
        outcome = await attempt(impatient, call)
        assert isinstance(outcome, AmbiguousError), (
            f"a write slower than the attempt (timed out after the request left) must be ambiguous, got {outcome!r}"
        )
        landed = await effects_reach(target, before + 1)
        assert landed == before + 1, f"the slow write should land once; the provider has {landed - before} effects"
        obs = await adapter.verify(call)
        assert_verified(adapter, obs, Outcome.CONFIRMED, "after a write slower than the attempt")
        assert await target.effects() == before + 1, "verify must not write"
        assert_no_secret(target, outcome, obs)
    finally:
        await impatient.close()
        await adapter.close()


async def late_write_is_never_absent_early(target: ConformanceTarget) -> None:
    adapter = await target.build()
    impatient = await target.build(timeout=target.slow_seconds / 3)
    try:
        kept = adapter.capabilities.keeps_processing
        before = await target.effects()
        call = new_call(impatient, target.good_payload(tag()))
        target.inject("lands_late")
        sent = time.monotonic()
        outcome = await attempt(impatient, call)
        assert isinstance(outcome, AmbiguousError), (
            f"a write the caller gave up on before the provider applied it must be ambiguous, got {outcome!r}"
        )
        # Read until it lands: the latest moment (seconds after the send) a read began that found
        # nothing while the provider had still to apply the write.
        absent_at = -1.0
        deadline = sent + target.slow_seconds + 60.0
        while await target.effects() == before and time.monotonic() < deadline:
            asked = time.monotonic() - sent
            early = await adapter.verify(call)
            if early.outcome is Outcome.NOT_FOUND and await target.effects() == before:
                absent_at = asked
            await asyncio.sleep(0.1)
        landed = await target.effects()
        assert landed == before + 1, f"the late write should land once; the provider has {landed - before} effects"
        assert absent_at < kept, (
            f"keeps_processing ({kept:g} s) is shorter than this provider takes to apply a write: verify answered"
            f" NOT_FOUND {absent_at:.1f} s after the send and the write landed later; past keeps_processing the"
            " gateway takes that NOT_FOUND for absence and sends the action again (two effects)"
        )
        obs = await adapter.verify(call)
        assert_verified(adapter, obs, Outcome.CONFIRMED, "after a write that landed after its caller gave up")
        assert await target.effects() == before + 1, "verify must not write"
        assert_no_secret(target, outcome, obs)
    finally:
        await impatient.close()
        await adapter.close()


async def conflict_is_not_a_refusal(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("conflict")
        outcome = await attempt(adapter, call)
        assert isinstance(outcome, AmbiguousError | NoEffectError), (
            f"a 409 (key in use, nothing applied yet) must be ambiguous, got {outcome!r}:"
            " a DefinitiveError would end an action that a later send completes, a receipt claims an effect"
        )
        assert await target.effects() == before, "the injected 409 applied nothing at the provider"
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED, f"a 409 that applied nothing verified CONFIRMED: {obs}"
        again = await attempt(adapter, call)
        assert isinstance(again, Receipt), f"the same call after a 409 failed: {again!r}"
        assert await target.effects() == before + 1
        assert_no_secret(target, outcome, obs, again)
    finally:
        await adapter.close()


async def key_dedups_a_resend(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        if not adapter.capabilities.dedups_on_key:
            return  # nothing to prove: the gateway never resends blindly to such a provider
        before = await target.effects()
        call = new_call(adapter, target.good_payload(tag()))
        target.inject("drop_after_commit")
        lost = await attempt(adapter, call)
        assert isinstance(lost, AmbiguousError), f"a lost response must be ambiguous, got {lost!r}"
        resent = await attempt(adapter, call)
        effects = await target.effects()
        assert effects == before + 1, (
            f"dedups_on_key is declared, but a resend with the same provider_key made {effects - before} effects:"
            " the idempotency key is not sent (send call.provider_key as the provider's key)"
        )
        assert isinstance(resent, Receipt), f"the provider deduplicated the resend; expected a receipt, got {resent!r}"
        assert_no_secret(target, lost, resent)
    finally:
        await adapter.close()
