"""Regressions of the defects the simulator found once it simulated waits, bypasses, limit grants,
`unique = "scope"` tools, crashes at named failpoints and webhooks (tests/sim/acts.py,
webhooks.py): each replays the seed that found it."""

from __future__ import annotations

import asyncio
import gc
import itertools
import re
from dataclasses import replace
from typing import ClassVar

import pytest

from effectgate.gateway.model import ActionEvent, ActionRecord
from effectgate.gateway.store.faults import StoreUnavailable
from effectgate.testing.sim.store import SimStore
from tests.sim import replicas
from tests.sim.world import WHOLE, World


@pytest.mark.parametrize("seed", [545, 631])
def test_a_wait_whose_feed_failed_leaves_no_error_unretrieved(seed: int) -> None:
    """A wait re-read its action while the tenant's feed lost the store and handed every waiter
    the error; the wait returned from its re-read without awaiting that answer, and asyncio
    logged "Future exception was never retrieved" when the future was collected. Waits now read
    an answer nobody awaited when the wait leaves (core/operators/waits.py)."""
    outcome = World(seed, WHOLE).run()
    gc.collect()  # the error is logged when the future is collected, after the run
    assert outcome.counts["act_wait"] >= 1
    assert outcome.violations == []


def test_a_call_that_failed_as_its_world_ended_leaves_no_error_unretrieved() -> None:
    """Seed 6489 (found by the long run, `make sim-campaign`): an agent's call into a replica that
    had not read the store's clock yet ended with ClockSkewed at the world's last moment, and the
    callback that reads an answer nobody awaits (caller.py) was still queued when the loop closed.
    The exception was then reported as never retrieved whenever the collector met the task: in
    the run of seeds 6001..7000, not when the seed ran alone. A world now runs those callbacks
    when it ends (the simulator's own bookkeeping: the protocol answered as it should)."""
    outcome = World(6489).run()
    gc.collect()  # the report came when the task was collected, after the run
    assert outcome.violations == []


def test_an_attempt_in_doubt_approved_under_an_old_policy_is_not_retried_with_its_key() -> None:
    """Seed 77042 (found by the long run): an `approve` action approved under config version 1
    was dispatched, went UNKNOWN before its request left, and the replica restarted with version
    2 (the tool's policy changed) read it back inside the window and sent it again with the same
    key: the effect's first arrival, under the new policy, on the old approval. A same-key retry
    now waits for the proof: absent, the action is asked again (core/protocol/driver.py)."""
    outcome = World(77042).run()
    assert outcome.violations == []
    assert outcome.counts["reload"] == 1


def test_a_wait_standing_still_in_a_stall_as_its_world_ended_leaves_no_error_unretrieved() -> None:
    """Seed 42176 (found by the long run, twice, in the run of seeds 42001..43000 and not alone):
    a wait on r2 stood still in a stall before its re-read of the action when r2 was killed for
    the redeploy, and its tenant's feed had handed its answer the store's outage. The world ended
    before the stall did (a timer the closed loop never fires), so the wait was left to the
    garbage collector: its `finally` read the error if its coroutine was closed before the future
    was freed, and "Future exception was never retrieved" was reported if not, an order the
    collector chose. A world now closes every task still pending when it ends, in the order they
    were made (the simulator's own bookkeeping: a killed process runs nothing, a live one's wait
    reads its answer when it leaves)."""
    world = World(42176)
    outcome = world.run()
    assert any("stall r2 before store.read" in line for line in outcome.trace), "the seed no longer stalls r2"
    assert any("wait act_6a02c69b decided 5s on r2: gone" in line for line in outcome.trace)
    unread = [
        f
        for f in gc.get_objects()
        if isinstance(f, asyncio.Future) and f.get_loop() is world.loop and f.done() and f._log_traceback
    ]
    assert unread == []
    assert outcome.violations == []


class _LostCommitStore(SimStore):
    """A replica's store on which a webhook's write that settles an action commits and then loses
    its answer (the connection dropped after COMMIT), as the store's commit-unknown fault does."""

    lost: ClassVar[list[str]] = []

    async def update(self, record: ActionRecord, event: ActionEvent | None = None) -> bool:
        written = await super().update(record, event)
        by_webhook = event is not None and "webhook" in repr(event)
        if by_webhook and record.state.terminal and record.action_id not in self.lost:
            self.lost.append(record.action_id)
            raise StoreUnavailable("simulated: committed, then the connection dropped")
        return written


@pytest.mark.parametrize("seed", [8, 19])
def test_a_webhook_whose_commit_answer_was_lost_never_writes_the_action_back(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by seed 2166 (before the simulator stopped a replica killed during a stall from
    writing): a webhook's settling write committed CONFIRMED, its answer was lost, and the intake
    released its lease with the record it had leased, under the same fence, so the action went
    back to UNKNOWN ("left its terminal state"). Replayed here on seeds whose webhooks settle an
    action, with that write's answer always lost; the intake now releases only an action that is
    still as it leased it (core/provider/reports.py)."""
    monkeypatch.setattr(replicas, "SimStore", _LostCommitStore)
    _LostCommitStore.lost.clear()
    outcome = World(seed, WHOLE).run()
    assert _LostCommitStore.lost, "no webhook settled an action: the seed no longer reaches the defect"
    assert outcome.violations == []


@pytest.mark.parametrize("seed", [160, 164])
def test_an_approval_proven_unsent_under_a_changed_policy_is_asked_again_then_sent(seed: int) -> None:
    """Found by the simulator's redeploy (tests/sim/reloads.py), seeds 7, 10 and 28 of the world
    before [[notify]] was in it: an `approve` action approved under the tool's old policy had its
    intent stored (DISPATCHED) when its replica was killed to restart with a new config; the new
    replica proved the attempt absent (NOT_FOUND) and sent it again on the old approval, under the
    new policy. An approval proven unsent is now as unsent as a PLANNED one: the drive moves it
    back to AWAITING_APPROVAL (core/protocol/driver.py). Seed 1591 then found such an action,
    approved again after its attempts were used up, lingering PLANNED (the reconciler had no send
    left for it): a PLANNED action is now sent once at least (transitions/moves.py; held by
    tests/test_transitions.py: once the simulator's later changes redrew the worlds, seed 1591 no
    longer reached it, and 52 is another seed that reaches the re-approval; 28 stopped reaching it
    when a replica came to wait for its first reading of the store's clock, and 160 took its place;
    52 stopped when waits came to read their action again before answering, and 164 took its)."""
    outcome = World(seed, WHOLE).run()
    reload = next(i for i, line in enumerate(outcome.trace) if "reload: config version 2" in line)
    after = [line.split() for line in outcome.trace[reload:] if line.split()[1] == "row"]
    asked = [
        (a[2], a[0])
        for a, b in itertools.pairwise(after)
        if a[3] == "NOT_FOUND" and b[2] == a[2] and b[3] == "AWAITING_APPROVAL" and b[0] == a[0]
    ]
    assert asked, "no approval proven unsent after the reload: the seed no longer reaches the defect"
    assert outcome.violations == []


def test_seed_2778_keeps_each_tenants_limit_grant_its_own_and_answers_an_outage_unavailable() -> None:
    """Found by the simulator's second tenant (tests/sim/tenants.py), two defects in one seed:
    `dev`'s operator granted a refused call its limit, its answer lost in a store outage (which
    reached the operator as an internal error, not UNAVAILABLE: core/limits/usage_and_grants.py
    now says UNAVAILABLE); then `acme`'s operator named the same action id and its grant replaced
    `dev`'s (one row per action id), so `dev`'s call, granted, was refused again. A grant is now
    keyed by action id and tenant (migration 0011). Later changes to the simulator redrew the
    worlds: seed 2778 now grants `dev`'s call, has `acme`'s operator name the same action id after
    it, and meets an outage on a grant (in its world without the MCP upstream, which came later)."""
    outcome = World(2778, replace(WHOLE, off=frozenset({"mcp"}))).run()
    grants = [line for line in outcome.trace if "grant_limit" in line and "act_f33d978a" in line]
    granted = next(i for i, line in enumerate(grants) if re.search(r"operator grant_limit \S+ on r\d+: ok", line))
    assert any("operator of acme grant_limit dev's act_f33d978a" in line for line in grants[granted:]), grants
    assert any(re.search(r"operator grant_limit \S+ on r\d+: GatewayUnavailable", line) for line in grants), grants
    assert outcome.violations == []


@pytest.mark.parametrize("seed", [12, 57, 78])
def test_a_wait_answers_reached_when_the_action_got_there_even_if_its_feed_missed_it(seed: int) -> None:
    """Waits answered "not reached" with the action decided (seeds 12, 57, 78 of the budget, and
    dozens more in 2,000, once the simulator checked it): a wait ran out (its replica stalled, its
    feed with it) while another replica decided the action, and answered the action it read then
    with `reached=False` whatever that read showed. A wait that runs out now says whether the
    action it read got there (core/operators/waits.py); the simulator checks both directions
    (checks_more.py `waited`)."""
    outcome = World(seed).run()
    assert outcome.counts["act_wait"] >= 1
    assert outcome.violations == []
