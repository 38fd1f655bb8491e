"""The answer to a replayed settled action is serialised once per record object (with the answer
to the Execute that settled it, from one Action), never reused for a changed record, never
cached for an unsettled one, dropped with its record, and the cache is bounded."""

from __future__ import annotations

import time

from effectgate.adapters.base import Receipt
from effectgate.client import RunContext
from effectgate.gateway.config.schema import Bypass
from effectgate.gateway.core.protocol.replay_cache import ReplayCache, TtlCache
from effectgate.gateway.model.domain import ActionIdentity, ActionRecord, State
from effectgate.gateway.rpc.wire import execute_answer, execute_answers, replay_answer
from effectgate.testing import ScriptedAdapter, gateway
from effectgate.testing.clock import FakeClock
from effectgate.testing.rig import TENANT, rig
from effectgate.tools.v1.tools_pb2 import ChargeCard
from effectgate.v1 import gateway_pb2 as pb


def record(n: int, state: State = State.CONFIRMED) -> ActionRecord:
    who = ActionIdentity("acme", "run", f"step-{n}", "charge_card", "order:1")
    return ActionRecord.of(
        who.action_id,
        who,
        payload_type="t",
        payload=b"",
        fingerprint="f",
        state=state,
        created_at=1.0,
        updated_at=2.0,
        receipt=Receipt(external_id=f"pi_{n}", result={"status": "succeeded"}),
    )


def decoded(answer: bytes) -> pb.ExecuteResponse:
    return pb.ExecuteResponse.FromString(answer)


class Answers:
    """A replay of `record` as the protocol and the Execute handler answer it: the kept answer,
    else one serialised for this call."""

    def __init__(self, capacity: int) -> None:
        self.cache = ReplayCache(capacity=capacity)
        self.cache.answer_with(replay_answer)

    def replayed(self, record: ActionRecord) -> bytes:
        answer = self.cache.replay(record)
        return answer if answer is not None else execute_answer(record, True)


def test_a_settled_record_is_serialised_once_and_a_changed_one_again() -> None:
    answers = Answers(capacity=2)
    first = record(1)
    built = answers.replayed(first)
    response = decoded(built)
    assert answers.replayed(first) is built
    assert response.replayed and response.action.state == pb.EFFECT_STATE_CONFIRMED
    assert response.action.receipt.external_id == "pi_1"
    changed = first.evolve(notes=("reconciled",))
    assert list(decoded(answers.replayed(changed)).action.notes) == ["reconciled"]
    pending = record(2, State.DISPATCHED)
    assert answers.replayed(pending) is not answers.replayed(pending)
    assert decoded(answers.replayed(pending)).action.state == pb.EFFECT_STATE_DISPATCHED
    second, third = record(3), record(4)
    kept = answers.replayed(second)
    answers.replayed(third)
    answers.replayed(first)  # first in, first out: `changed`'s entry is gone, then `second`'s
    assert decoded(answers.replayed(third)).action.receipt.external_id == "pi_4"
    assert answers.replayed(second) is not kept


def test_dropping_an_action_drops_its_answer_with_its_record() -> None:
    answers = Answers(capacity=2)
    first = record(1)
    built = answers.replayed(first)
    answers.cache.drop(first.action_id)
    assert answers.cache.get(first.action_id) is None
    again = answers.replayed(first)
    assert again is not built and again == built


def test_without_a_serializer_nothing_is_serialised() -> None:
    cache = ReplayCache()
    assert cache.replay(record(1)) is None and cache.get(record(1).action_id) is not None


async def test_a_known_replay_returns_the_kept_answer_and_a_grant_drops_it() -> None:
    r = await rig(bypass=Bypass.OPERATOR)
    r.protocol.answer_replays_with(replay_answer)
    first = await r.execute()
    assert not first.replayed and first.answer is None  # a new action: the handler serialises it
    second = await r.execute()  # the same request: its answer is made now, once
    third = await r.execute()
    assert second.replayed and second.answer is not None and third.answer is second.answer
    assert decoded(second.answer) == pb.ExecuteResponse.FromString(execute_answer(first.record, True))
    await r.operations.grant_bypass(TENANT, first.record.action_id, "ops", "asked twice")
    assert len(r.cache) == 0
    fourth = await r.execute()  # read again from the store: a granted record is not kept
    assert fourth.replayed and fourth.answer is None and fourth.record.bypass_granted


def test_ttl_cache_purges_expired_entries_and_keeps_its_bound() -> None:
    clock = FakeClock()
    cache: TtlCache[str, int] = TtlCache(capacity=3, ttl=10.0, clock=clock)
    cache.put("a", 1)
    clock.advance(6)
    cache.put("b", 2)
    assert cache.get("a") == 1 and len(cache) == 2
    clock.advance(5)  # "a" expired: purged by the next store even though nobody asked for it
    cache.put("c", 3)
    assert len(cache) == 2 and cache.get("a") is None and cache.get("b") == 2
    cache.put("d", 4)
    cache.put("e", 5)  # over capacity: the oldest goes
    assert len(cache) == 3 and cache.get("b") is None and cache.get("e") == 5
    clock.advance(2)
    cache.put("c", 30)  # a store again moves the entry to the back with a new lifetime
    clock.advance(8.5)
    cache.put("f", 6)
    assert cache.get("c") == 30 and cache.get("d") is None
    cache.drop("c")
    assert cache.get("c") is None
    none: TtlCache[str, int] = TtlCache(capacity=0, ttl=10.0, clock=clock)
    none.put("a", 1)
    assert len(none) == 0


def test_ttl_cache_follow_is_two_gets_with_their_expiry() -> None:
    clock = FakeClock()
    known: TtlCache[str, str] = TtlCache(capacity=3, ttl=10.0, clock=clock)
    settled: TtlCache[str, int] = TtlCache(capacity=3, ttl=5.0, clock=clock)
    known.put("request", "act_1")
    assert known.follow("request", settled) is None and known.follow("other", settled) is None
    settled.put("act_1", 1)
    assert known.follow("request", settled) == 1
    clock.advance(5)  # the second entry expired: gone, the first kept
    assert known.follow("request", settled) is None and len(settled) == 0 and len(known) == 1
    clock.advance(2)
    settled.put("act_1", 2)
    clock.advance(3)  # the first expired: gone, the second untouched
    assert known.follow("request", settled) is None and len(known) == 0 and settled.get("act_1") == 2


def test_a_new_actions_answer_and_its_replays_come_from_one_action() -> None:
    kept = record(1)
    answer, replay = execute_answers(kept)
    assert answer == execute_answer(kept, False) and replay == replay_answer(kept)
    cache = ReplayCache()
    cache.answer_with(replay_answer)
    assert not cache.unanswered(kept)  # not kept: nothing to hand in
    cache.put(kept)
    assert cache.unanswered(kept)
    cache.keep_answer(kept.evolve(notes=("changed",)), b"another record's")  # never for another record
    cache.keep_answer(record(2), b"not kept")
    assert cache.unanswered(kept) and cache.get(record(2).action_id) is None
    cache.keep_answer(kept, replay)
    assert not cache.unanswered(kept) and cache.replay(kept) is replay


async def test_the_execute_that_settles_an_action_hands_its_replays_answer_to_the_cache() -> None:
    cards = ScriptedAdapter(time.time)
    async with gateway(adapters={"cards": cards}) as gw:
        context = RunContext(run_id="run-1", step_id="charge")
        charge = ChargeCard(customer="cus_1", amount=1000, currency="usd", payment_method="pm_card_visa")
        first = await gw.client.execute("cards", charge, scope="invoice:1", context=context)
        cache = gw.server.protocol.parts.cache
        settled = cache.get(first.action.action_id)
        assert settled is not None and not cache.unanswered(settled)  # the answer is already kept
        assert cache.replay(settled) == replay_answer(settled)
        again = await gw.client.execute("cards", charge, scope="invoice:1", context=context)
    assert again.replayed and again.action == first.action
