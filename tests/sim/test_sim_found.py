"""Regressions of the defects the simulator found once it simulated waits, bypasses, limit grants,
`unique = "scope"` tools, crashes at named failpoints and webhooks (tests/sim/acts.py,
webhooks.py): each replays the seed that found it."""

from __future__ import annotations

import gc
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


@pytest.mark.parametrize("seed", [8, 15])
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
