"""Regressions of the defects the simulator found once it simulated waits, bypasses, limit grants,
`unique = "scope"` tools, crashes at named failpoints and webhooks (tests/sim/acts.py,
webhooks.py): each replays the seed that found it."""

from __future__ import annotations

import gc

import pytest

from tests.sim.world import World


@pytest.mark.parametrize("seed", [216, 2026])
def test_a_wait_whose_feed_failed_leaves_no_error_unretrieved(seed: int) -> None:
    """A wait re-read its action while the tenant's feed lost the store and handed every waiter
    the error; the wait returned from its re-read without awaiting that answer, and asyncio
    logged "Future exception was never retrieved" when the future was collected. Waits now read
    an answer nobody awaited when the wait leaves (core/operators/waits.py)."""
    outcome = World(seed).run()
    gc.collect()  # the error is logged when the future is collected, after the run
    assert outcome.counts["act_wait"] >= 1
    assert outcome.violations == []
