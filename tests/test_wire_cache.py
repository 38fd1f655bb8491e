"""The wire form of a settled action is built once per record object, never reused for a changed
record, never cached for an unsettled one, and the cache is bounded."""

from __future__ import annotations

from effectgate.adapters.base import Receipt
from effectgate.gateway.domain import ActionIdentity, ActionRecord, State
from effectgate.gateway.rpc.wire import SettledActions
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


def test_a_settled_record_is_converted_once_and_a_changed_one_again() -> None:
    cache = SettledActions(size=2)
    first = record(1)
    built = cache.action(first)
    assert cache.action(first) is built and built.state == pb.EFFECT_STATE_CONFIRMED
    changed = first.evolve(notes=("reconciled",))
    assert cache.action(changed) is not built and list(cache.action(changed).notes) == ["reconciled"]
    pending = record(2, State.DISPATCHED)
    assert cache.action(pending) is not cache.action(pending)
    second, third = record(3), record(4)
    kept = cache.action(second)
    cache.action(third)
    cache.action(first)  # evicts the least recently used: `changed`'s entry is gone, `second` too
    assert cache.action(third).receipt.external_id == "pi_4"
    assert cache.action(second) is not kept
