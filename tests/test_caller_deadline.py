"""A caller whose deadline passes while the provider call is running is answered IN_FLIGHT at its
answer time, `answer_by(deadline)`: half its budget before the deadline, at most 1 s before it,
with the call's remaining time as the retry delay; the call itself is not cut by the caller's
deadline and ends at the tool's attempt timeout.

Run on the simulator's virtual loop, so the times are exact: the real-process test of the same
claim (tests/test_slow_cut.py) can only check the answer's kind, with a margin a loaded
machine's event loop keeps.
"""

from __future__ import annotations

import asyncio

import pytest

from effectgate.gateway.core.protocol.execute import answer_by
from effectgate.gateway.model.domain import State
from effectgate.gateway.model.errors import InFlight
from effectgate.testing import Hang, ScriptedAdapter, rig
from effectgate.testing.clock import FakeClock
from effectgate.testing.sim import loop as virtual

ATTEMPT = 2.5  # the tool's attempt_timeout: the provider call runs this long, then is cut


class LoopClock(FakeClock):
    """The kit's clock read from the running (virtual) loop, so the protocol's clock and its
    asyncio timeouts are one time."""

    def __call__(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@pytest.mark.parametrize("budget", [0.1, 0.5, 2.0])
def test_a_caller_is_answered_in_flight_at_its_answer_time_and_the_call_goes_on(budget: float) -> None:
    async def main() -> tuple[float, float, State, State, int]:
        clock = LoopClock()
        adapter = ScriptedAdapter(clock, dedups_on_key=False)
        r = await rig(clock=clock, adapter=adapter, attempt_timeout=ATTEMPT, lease_ttl=10.0)
        adapter.script_execute(Hang())  # the provider never answers: the attempt timeout cuts it
        start = clock()
        with pytest.raises(InFlight) as caught:
            await r.execute(budget=budget)
        answered = clock() - start
        action = caught.value.action_id
        await asyncio.sleep(start + ATTEMPT - 0.01 - clock())
        before_cut = r.stored(action).state  # the drive goes on under its lease after the answer
        await asyncio.sleep(0.02)
        return answered, caught.value.retry_after, before_cut, r.stored(action).state, len(adapter.executed)

    answered, retry_after, before_cut, state, sent = virtual.run(main)
    assert answered == pytest.approx(answer_by(budget, 0.0)) == pytest.approx(budget - min(1.0, budget / 2))
    assert retry_after == pytest.approx(max(0.5, ATTEMPT - answered))  # the call's remaining time
    # The call is cut at its attempt timeout, not at the caller's deadline, and ends in doubt.
    assert before_cut is State.DISPATCHED
    assert state is State.UNKNOWN and sent == 1
