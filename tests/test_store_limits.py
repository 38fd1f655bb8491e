"""The limits' store primitives (claim, update_accounted, release_reservation, usage, grant_limit)
on SQLite, PostgreSQL and the kit's MemoryStore: a reservation commits with its claim or not at
all, concurrent reservers on two connections never pass a cap, a release gives back exactly once,
a limit grant lets one reservation past its cap once."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from effectgate.gateway.model import Bucket, BudgetExceeded, LimitGrant, RateLimited, Reservation, State
from effectgate.gateway.store import Store
from effectgate.testing import MemoryStore
from effectgate.testing.store import MemoryDatabase
from tests.store_backends import Backend, PostgresBackend, SqliteBackend, record

NOW = 10_000.0


def reservation(amount: int = 1000, *, budget: int | None = 3000, effects: int | None = None) -> Reservation:
    buckets = []
    if effects is not None:
        buckets.append(Bucket("*", "w:0", 0, effects, None, "max_effects", "budget", resets_at=NOW + 60))
    if budget is not None:
        buckets.append(Bucket("eur", "w:0", amount, None, budget, "max_effects", "budget", resets_at=NOW + 60))
    return Reservation("t", "charge_card", "eur", amount, tuple(buckets), at=NOW)


@pytest.fixture(params=["sqlite", "postgres", "memory"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], object]]:
    """Opened stores on one database."""
    if request.param == "memory":
        db = MemoryDatabase()

        async def memory() -> Store:
            store = MemoryStore(db)
            await store.open()
            return store

        yield memory
        return
    backend: Backend
    if request.param == "sqlite":
        backend = SqliteBackend(tmp_path)
    else:
        backend = PostgresBackend(request.getfixturevalue("pg_admin_dsn"))
        await backend.create()
    try:
        yield backend.store
    finally:
        await backend.aclose()


async def test_claim_reserves_with_the_insert_and_a_denial_inserts_nothing(stores: Callable[[], object]) -> None:
    store: Store = await stores()  # type: ignore[misc]
    for i in range(3):
        assert (await store.claim(record(f"a{i}", tenant="t"), reservation()))[1]
    with pytest.raises(BudgetExceeded) as caught:
        await store.claim(record("a3", tenant="t"), reservation())
    assert caught.value.figures["left"] == "0" and caught.value.figures["spent"] == "3000"
    assert await store.get("a3") is None
    # An existing action is returned as it is: nothing reserved again, even when full.
    stored, inserted = await store.claim(record("a0", tenant="t", fingerprint="other"), reservation())
    assert not inserted and stored.action_id == "a0"
    assert await store.usage("t", "charge_card") == [("eur", "w:0", 3, 3000)]


async def test_concurrent_reservers_on_two_stores_never_pass_the_cap(stores: Callable[[], object]) -> None:
    first: Store = await stores()  # type: ignore[misc]
    second: Store = await stores()  # type: ignore[misc]

    async def one(i: int) -> bool:
        try:
            return (await (first, second)[i % 2].claim(record(f"c{i}", tenant="t"), reservation(effects=7)))[1]
        except (BudgetExceeded, RateLimited):
            return False

    won = await asyncio.gather(*(one(i) for i in range(40)))
    assert sum(won) == 3
    assert sorted(await first.usage("t", "charge_card")) == [("*", "w:0", 3, 0), ("eur", "w:0", 3, 3000)]


async def test_release_is_once_and_a_send_out_of_not_found_is_checked_again(stores: Callable[[], object]) -> None:
    store: Store = await stores()  # type: ignore[misc]
    action = record("r1", tenant="t", state=State.DISPATCHED)
    await store.claim(action, reservation(budget=1500))
    gone = dataclasses.replace(action, state=State.NOT_FOUND)
    assert await store.update_accounted(gone, release=True)
    assert await store.update_accounted(gone, release=True)  # written again: nothing more given back
    assert not await store.release_reservation("r1", 0)
    assert await store.usage("t", "charge_card") == [("eur", "w:0", 0, 0)]
    await store.claim(record("r2", tenant="t"), reservation(budget=1500))  # takes the room meanwhile
    with pytest.raises(BudgetExceeded):
        await store.update_accounted(dataclasses.replace(gone, state=State.DISPATCHED), hold=reservation(budget=1500))
    assert (await store.get("r1")) == gone  # the dispatch was not written
    assert await store.release_reservation("r2", 0)
    sent = dataclasses.replace(gone, state=State.DISPATCHED)
    assert await store.update_accounted(sent, hold=reservation(budget=1500))
    assert await store.update_accounted(sent, hold=reservation(budget=1500))  # held already: no second count
    assert await store.usage("t", "charge_card") == [("eur", "w:0", 1, 1000)]
    # A new generation (a bypass) is counted as it stands, past the cap.
    bypass = dataclasses.replace(sent, generation=1)
    assert await store.update_accounted(bypass, hold=reservation(budget=1500))
    assert await store.usage("t", "charge_card") == [("eur", "w:0", 2, 2000)]
    # A stale fence writes nothing and counts nothing.
    assert not await store.update_accounted(dataclasses.replace(bypass, fence=99, generation=2), hold=reservation())
    assert await store.usage("t", "charge_card") == [("eur", "w:0", 2, 2000)]


async def test_a_limit_grant_lets_one_reservation_past_its_cap_once(stores: Callable[[], object]) -> None:
    first: Store = await stores()  # type: ignore[misc]
    second: Store = await stores()  # type: ignore[misc]
    for i in range(3):
        await first.claim(record(f"g{i}", tenant="t"), reservation())
    # A grant of another tenant, or an expired one, lets nothing through.
    await first.grant_limit(LimitGrant("g3", "other", "alice", "n", NOW - 10, NOW + 60))
    with pytest.raises(BudgetExceeded):
        await first.claim(record("g3", tenant="t"), reservation())
    await first.grant_limit(LimitGrant("g3", "t", "alice", "n", NOW - 120, NOW - 60))
    with pytest.raises(BudgetExceeded):
        await first.claim(record("g3", tenant="t"), reservation())
    await first.grant_limit(LimitGrant("g3", "t", "alice", "month end", NOW - 10, NOW + 60))
    await first.grant_limit(LimitGrant("g4", "t", "alice", "another", NOW - 10, NOW + 60))
    # Another tenant's operator naming the same id after it takes nothing over (the simulator's
    # seed 68: tenant t's call, granted, was refused again): each tenant's grant is its own.
    await first.grant_limit(LimitGrant("g3", "other", "mallory", "mine", NOW - 5, NOW + 60))

    # Concurrent claims of the granted id on two stores: one action, one grant taken.
    async def claim(store: Store) -> bool:
        return (await store.claim(record("g3", tenant="t"), reservation()))[1]

    assert sorted(await asyncio.gather(claim(first), claim(second))) == [False, True]
    assert await first.usage("t", "charge_card") == [("eur", "w:0", 4, 4000)]
    kinds = [(e.kind, e.principal, e.note) for e in await first.history("g3")]
    assert kinds == [("limit_grant", "alice", "month end")]  # (the claim was written without an event)
    (taken,) = [e for e in await first.history("g3") if e.kind == "limit_grant"]
    assert taken.detail["reason"] == "BUDGET_EXCEEDED" and taken.detail["figures"]["spent"] == "3000"
    # Used: a send out of NOT_FOUND of the same id is checked again, and refused.
    gone = dataclasses.replace(record("g3", tenant="t"), state=State.NOT_FOUND, fence=0)
    assert await first.update_accounted(gone, release=True)
    await first.claim(record("g5", tenant="t"), reservation(amount=1000, budget=4000))  # takes the room back
    with pytest.raises(BudgetExceeded):
        await first.update_accounted(dataclasses.replace(gone, state=State.DISPATCHED), hold=reservation())
    # A reservation that fits takes no grant.
    await first.claim(record("g4", tenant="t"), reservation(budget=None, effects=100))
    with pytest.raises(BudgetExceeded):
        await first.claim(record("g6", tenant="t"), reservation())
    assert [e.kind for e in await first.history("g4")] == []
