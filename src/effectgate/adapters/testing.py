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
  including when the provider rejects the credentials.

The simulator's secret must be the target's `canary`, so every check also scans its errors and
observations for it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from google.protobuf.message import Message

from effectgate.adapters.base import (
    ActionCall,
    Adapter,
    AdapterError,
    AmbiguousError,
    DefinitiveError,
    NoEffectError,
    Observation,
    Outcome,
    Receipt,
)


class ConformanceTarget(Protocol):
    """How to drive one adapter against its running provider simulator."""

    # Name shown in test ids.
    name: str
    # The provider secret the simulator accepts; it must never show in adapter output.
    canary: str
    # How long a `delayed_visibility` write stays unreadable (seconds).
    visibility_lag: float
    # True only when the provider's success reply cannot reveal a partial effect (SMTP's 250).
    partial_hidden_in_reply: bool

    async def build(self, secret: str | None = None) -> Adapter:
        """The adapter wired to the simulator, holding `secret` (default: the canary)."""
        ...

    def good_payload(self, tag: str) -> Message:
        """A payload the provider accepts; `tag` is unique per call (use it in ids)."""
        ...

    def refused_payload(self, tag: str) -> Message:
        """A payload the provider refuses definitively (validation, declined card)."""
        ...

    def inject(self, *faults: str | None) -> None:
        """Scripts the faults of the next fresh writes (None = no fault)."""
        ...

    async def effects(self) -> int:
        """Effects the provider has recorded so far (its ledger, duplicates included)."""
        ...


def new_call(adapter: Adapter, payload: Message, *, tool: str = "conformance") -> ActionCall:
    tag = uuid.uuid4().hex[:16]
    return ActionCall(
        action_id=f"act_{tag}",
        provider_key=f"key_{tag}",
        payload=adapter.normalize(payload),
        scope=f"test:{tag}",
        tool=tool,
        tenant="conformance",
    )


def _tag() -> str:
    return uuid.uuid4().hex[:12]


async def _attempt(adapter: Adapter, call: ActionCall) -> Receipt | AdapterError:
    try:
        return await adapter.execute(call)
    except AdapterError as exc:
        return exc


def _assert_no_secret(target: ConformanceTarget, *things: Any) -> None:
    for thing in things:
        texts = [str(thing), repr(thing)]
        if isinstance(thing, AdapterError):
            texts += [thing.message, repr(thing.details)]
        if isinstance(thing, Observation):
            texts += [thing.detail, repr(thing.evidence)]
        leaked = [t for t in texts if target.canary in t]
        assert not leaked, f"{target.name}: the secret leaked in {type(thing).__name__}: {leaked[0]!r}"


def _assert_verified(adapter: Adapter, obs: Observation, want: Outcome, where: str) -> None:
    if adapter.capabilities.has_read_api:
        assert obs.outcome is want, f"{where}: verify gave {obs.outcome} ({obs.detail}), expected {want}"
    else:
        assert obs.outcome is Outcome.UNKNOWN, f"{where}: no read API must verify UNKNOWN, got {obs}"
        assert obs.detail, f"{where}: an UNKNOWN needs a reason"


async def one_execute_one_effect(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(_tag()))
        receipt = await adapter.execute(call)
        assert isinstance(receipt, Receipt) and receipt.external_id
        assert await target.effects() == before + 1
        obs = await adapter.verify(call)
        _assert_verified(adapter, obs, Outcome.CONFIRMED, "after a clean execute")
        assert await target.effects() == before + 1, "verify must not write"
        _assert_no_secret(target, receipt, obs)
    finally:
        await adapter.close()


async def lost_response_is_verified(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(_tag()))
        target.inject("drop_after_commit")
        outcome = await _attempt(adapter, call)
        assert isinstance(outcome, AmbiguousError), f"a lost response must be ambiguous, got {outcome!r}"
        assert await target.effects() == before + 1
        obs = await adapter.verify(call)
        _assert_verified(adapter, obs, Outcome.CONFIRMED, "after a lost response")
        # The proof replaces a second send: still exactly one effect.
        assert await target.effects() == before + 1
        _assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def not_found_is_not_absence(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        assert adapter.capabilities.consistency_window >= target.visibility_lag, (
            "the declared consistency window must cover the provider's visibility lag"
        )
        call = new_call(adapter, target.good_payload(_tag()))
        target.inject("delayed_visibility")
        outcome = await _attempt(adapter, call)
        early = await adapter.verify(call)
        _assert_verified(adapter, early, Outcome.NOT_FOUND, "before the write is visible")
        await asyncio.sleep(target.visibility_lag + 0.2)
        late = await adapter.verify(call)
        _assert_verified(adapter, late, Outcome.CONFIRMED, "after the lag")
        _assert_no_secret(target, outcome, early, late)
    finally:
        await adapter.close()


async def definitive_refusal(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.refused_payload(_tag()))
        outcome = await _attempt(adapter, call)
        assert isinstance(outcome, DefinitiveError), f"expected DefinitiveError, got {outcome!r}"
        assert await target.effects() == before
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED, f"a refused action verified CONFIRMED: {obs}"
        _assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def partial_never_confirmed(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        call = new_call(adapter, target.good_payload(_tag()))
        target.inject("partial")
        outcome = await _attempt(adapter, call)
        if not target.partial_hidden_in_reply:
            assert not isinstance(outcome, Receipt), f"a receipt for a partial effect: {outcome}"
            assert not isinstance(outcome, DefinitiveError), "a partial effect is not 'no effect'"
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED, f"a partial effect verified CONFIRMED: {obs}"
        _assert_no_secret(target, outcome, obs)
    finally:
        await adapter.close()


async def rate_limit_is_no_effect(target: ConformanceTarget) -> None:
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(_tag()))
        target.inject("rate_limit")
        refused = await _attempt(adapter, call)
        assert isinstance(refused, NoEffectError), f"a rate-limit refusal must be NoEffectError, got {refused!r}"
        assert await target.effects() == before, "a rate-limited request applied an effect"
        again = await _attempt(adapter, call)
        assert isinstance(again, Receipt), f"the same call after the refusal failed: {again!r}"
        assert await target.effects() == before + 1
        _assert_no_secret(target, refused, again)
    finally:
        await adapter.close()


async def no_secret_leaks(target: ConformanceTarget) -> None:
    # A wrong secret that contains the canary: the provider refuses it, and the refusal (which
    # providers like to echo) must not carry it into errors, observations or reprs.
    wrong = f"x{target.canary}x"
    adapter = await target.build(wrong)
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload(_tag()))
        outcome = await _attempt(adapter, call)
        assert not isinstance(outcome, Receipt), "the provider accepted a wrong secret"
        assert await target.effects() == before
        obs = await adapter.verify(call)
        assert obs.outcome is not Outcome.CONFIRMED
        _assert_no_secret(target, outcome, obs, adapter, adapter.capabilities)
    finally:
        await adapter.close()
    good = await target.build()
    try:
        _assert_no_secret(target, good)
    finally:
        await good.close()


Check = Callable[[ConformanceTarget], Awaitable[None]]
CHECKS: dict[str, Check] = {
    "one_execute_one_effect": one_execute_one_effect,
    "lost_response_is_verified": lost_response_is_verified,
    "not_found_is_not_absence": not_found_is_not_absence,
    "definitive_refusal": definitive_refusal,
    "partial_never_confirmed": partial_never_confirmed,
    "rate_limit_is_no_effect": rate_limit_is_no_effect,
    "no_secret_leaks": no_secret_leaks,
}
