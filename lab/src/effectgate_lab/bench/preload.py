"""Fills a store with settled actions through the store API (not through gRPC), so the gateway can
be measured with 1 k or 1 M actions already stored. The records look like the gateway's own: real
action ids, a ChargeCard payload and fingerprint, a receipt."""

from __future__ import annotations

import time
from collections.abc import Iterator

from effectgate.adapters.base import Receipt
from effectgate.gateway.model import ActionRecord, NextStep, State, keys
from effectgate.gateway.store import open_store
from effectgate.tools.v1.tools_pb2 import ChargeCard

BATCH = 2000
TENANT = "default"


def settled_records(n: int, *, run_prefix: str = "preload") -> Iterator[ActionRecord]:
    payload = ChargeCard(customer="cus_preload", amount=500, currency="usd", payment_method="pm_card_visa")
    body, fingerprint = payload.SerializeToString(), keys.fingerprint(payload)
    type_url = "type.googleapis.com/" + payload.DESCRIPTOR.full_name
    now = time.time()
    for i in range(n):
        run_id, step_id = f"{run_prefix}-{i // 100}", f"step-{i % 100}"
        action = keys.action_id(TENANT, run_id, step_id, "charge_card", "s")
        yield ActionRecord(
            action_id=action,
            tenant=TENANT,
            run_id=run_id,
            step_id=step_id,
            tool="charge_card",
            scope="s",
            payload_type=type_url,
            payload=body,
            fingerprint=fingerprint,
            state=State.CONFIRMED,
            created_at=now - n + i,  # spread over time like a real history
            updated_at=now - n + i,
            tool_call_id=f"call-{i}",
            attempts=1,
            receipt=Receipt(external_id=f"pi_{i:012d}", provider_request_id=f"req_{i}", result={"status": "succeeded"}),
            next_step=NextStep.NONE,
            dispatched_at=now - n + i,
        )


async def preload(url: str, n: int) -> float:
    """Stores `n` settled actions; returns the seconds it took. Uses the store's batch insert
    when it has one (`insert_many`), else one insert per action."""
    store = open_store(url)
    await store.open()
    started = time.perf_counter()
    try:
        insert_many = getattr(store, "insert_many", None)
        batch: list[ActionRecord] = []
        for record in settled_records(n):
            if insert_many is None:
                await store.insert_if_absent(record)
                continue
            batch.append(record)
            if len(batch) == BATCH:
                await insert_many(batch)
                batch = []
        if batch and insert_many is not None:
            await insert_many(batch)
    finally:
        await store.close()
    return time.perf_counter() - started
