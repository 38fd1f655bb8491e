"""429 and 503 with `Retry-After` are refusals before acting that ask for a pause.

Every HTTP adapter (Stripe, Postmark, the generic http one) against its real simulator: the
simulator's `rate_limit` fault answers 429 (or 503) with or without `Retry-After` and applies
nothing. The adapter raises `RateLimited(retry_after=...)` when the provider names a pause and a
plain `NoEffectError` for a 429 without one; the provider holds no effect, and the same call
afterwards makes exactly one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.utils import formatdate

import pytest

from effectgate.adapters.base import AdapterError, NoEffectError, RateLimited, Receipt
from effectgate.adapters.http_outcome import MAX_RETRY_AFTER, retry_after
from effectgate.adapters.testing import new_call
from effectgate_lab.simulators.faults import FaultPlan
from tests.adapter_targets import Target, start_target

HTTP_TARGETS = ["stripe", "postmark", "http:activate_customer", "http:record_invoice"]


@pytest.fixture(params=HTTP_TARGETS)
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    started = await start_target(str(request.param))
    try:
        yield started
    finally:
        await started.stop()


async def _refused_then_once(target: Target, plan: FaultPlan) -> AdapterError:
    """Executes one call under a scripted `rate_limit`, then again; returns the first error."""
    assert target.sim is not None
    target.sim.injector.configure(plan)
    adapter = await target.build()
    try:
        before = await target.effects()
        call = new_call(adapter, target.good_payload("rl"))
        target.inject("rate_limit")
        with pytest.raises(NoEffectError) as refused:
            await adapter.execute(call)
        assert await target.effects() == before, "a rate-limited request applied an effect"
        assert target.canary not in str(refused.value)
        # Nothing was applied and nothing stored under the key: the same call now goes through.
        assert isinstance(await adapter.execute(call), Receipt)
        assert await target.effects() == before + 1
        return refused.value
    finally:
        await adapter.close()


async def test_429_with_retry_after_asks_for_that_pause(target: Target) -> None:
    error = await _refused_then_once(target, FaultPlan(retry_after=2))
    assert isinstance(error, RateLimited)
    assert error.retry_after == 2.0
    assert error.code == "rate_limited"


async def test_429_without_retry_after_is_a_plain_no_effect(target: Target) -> None:
    error = await _refused_then_once(target, FaultPlan(retry_after=None))
    assert not isinstance(error, RateLimited)
    assert error.code == "rate_limited"


async def test_503_with_retry_after_asks_for_that_pause(target: Target) -> None:
    error = await _refused_then_once(target, FaultPlan(retry_after=3, rate_limit_status=503))
    assert isinstance(error, RateLimited)
    assert error.retry_after == 3.0
    assert error.code == "unavailable"


def test_retry_after_reads_seconds_and_http_dates_and_is_capped() -> None:
    now = 1_800_000_000.0
    assert retry_after("2", now=now) == 2.0
    assert retry_after(" 1.5 ", now=now) == 1.5
    assert retry_after(formatdate(now + 10, usegmt=True), now=now) == 10.0
    assert retry_after(formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert retry_after("-5", now=now) == 0.0
    assert retry_after("86400", now=now) == MAX_RETRY_AFTER
    for unreadable in (None, "", "soon", "nan", "Mon, 99 Foo 2026"):
        assert retry_after(unreadable, now=now) is None
