"""The simulator's check of a no-effect answer (`checks.Watch.answer`), on its own: a `NOT_FOUND`
is true of the attempts sent before it was written, and another worker may send the action again
at once (that is what `NOT_FOUND` allows). Found by the long run at a41dfbc, seed 268928: one copy
of a call answered the `NOT_FOUND` it had written while a second copy, holding the next fence,
had just sent attempt 2; the check called that a false answer."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from effectgate.adapters.base import ActionCall
from effectgate.gateway.model import ActionRecord, State, keys
from effectgate.testing.sim import loop
from effectgate.testing.sim.provider import SimProvider
from effectgate.tools.v1 import tools_pb2
from tests.sim.checks import Watch
from tests.store_backends import record

ACTION = "act_" + "0" * 32


@dataclass
class _World:
    """What `Watch.answer` reads of a world: its provider, and where violations go."""

    provider: SimProvider
    violations: list[str] = field(default_factory=list)

    def violation(self, what: str) -> None:
        self.violations.append(what)


def _call(attempt: int) -> ActionCall:
    return ActionCall(ACTION, keys.provider_key(ACTION, 0), tools_pb2.ChargeCard(), "s", "pay", "acme", attempt=attempt)


def _not_found(attempts: int) -> ActionRecord:
    return record(ACTION, state=State.NOT_FOUND, attempts=attempts)


def _answers(attempt_sent: int, answered: ActionRecord, *, applied: bool) -> list[str]:
    """Sends `attempt_sent` (applying in 1 s), then checks `answered`: while it is pending, or once
    it has applied."""

    async def main() -> list[str]:
        provider = SimProvider(random.Random(1), asyncio.get_running_loop().time)
        world = _World(provider)
        sent = asyncio.ensure_future(
            provider.applied_after(
                _call(attempt_sent), 1.0, amount=100, lag=0.0, dedups=True, partial=False, slow=False
            )
        )
        await asyncio.sleep(0.5 if not applied else 1.5)
        Watch(world).answer(answered)  # type: ignore[arg-type]  # the two attributes it reads
        await sent
        return world.violations

    result: list[str] = loop.run(main)
    return result


def test_a_not_found_answered_while_a_later_attempt_is_pending_is_true() -> None:
    assert _answers(2, _not_found(1), applied=False) == []


def test_a_not_found_answered_after_a_later_attempt_applied_is_true_of_its_own() -> None:
    assert _answers(2, _not_found(1), applied=True) == []


def test_a_not_found_answered_while_its_own_attempt_is_pending_is_false() -> None:
    assert _answers(1, _not_found(1), applied=False) == [
        f"answered NOT_FOUND for {ACTION} while the provider has its effect"
    ]


def test_a_not_found_answered_after_its_own_attempt_applied_is_false() -> None:
    assert _answers(1, _not_found(1), applied=True) == [
        f"answered NOT_FOUND for {ACTION} while the provider has its effect"
    ]


def test_a_rejected_answered_with_an_earlier_attempt_pending_is_false() -> None:
    rejected = record(ACTION, state=State.REJECTED, attempts=2)
    assert _answers(1, rejected, applied=False) == [f"answered REJECTED for {ACTION} while the provider has its effect"]
