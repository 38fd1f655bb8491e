"""The store conformance suite: what every backend must do, written once.

`StoreConformance` is collected through tests/test_store_conformance.py, which parametrises the
`backend` fixture over SQLite and PostgreSQL. Times are plain numbers (the store never reads a
clock), so every lease and due-date case is exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable

import pytest

from effectgate.gateway.model.domain import ActionRecord, ListQuery, State
from effectgate.gateway.store import Store, StoreUnavailable, open_store, rows
from tests.store_backends import Backend, record, rich_record

NOW = 10_000.0


async def insert_all(store: Store, *records: ActionRecord) -> None:
    for rec in records:
        assert (await store.insert_if_absent(rec))[1]


async def list_all(store: Store, query: ListQuery) -> list[str]:
    """Every id the query pages through, in order; fails on a repeated page token."""
    ids: list[str] = []
    tokens: set[str] = set()
    while True:
        page = await store.list(query)
        ids.extend(r.action_id for r in page.records)
        if not page.next_token:
            return ids
        assert page.next_token not in tokens
        tokens.add(page.next_token)
        query = dataclasses.replace(query, after=page.next_token)


class StoreConformance:
    async def test_insert_if_absent_dedups(self, backend: Backend) -> None:
        store = await backend.store()
        first = record("a1")
        assert await store.insert_if_absent(first) == (first, True)
        other = record("a1", payload=b"different", fingerprint="other", created_at=2.0)
        assert await store.insert_if_absent(other) == (first, False)
        assert await store.get("a1") == first
        assert await store.get("absent") is None

    async def test_concurrent_inserts_of_one_id_insert_once(self, backend: Backend) -> None:
        stores = [await backend.store(), await backend.store()]
        candidates = [record("same", step_id=f"s{i}", fingerprint=f"f{i}") for i in range(50)]
        results = await asyncio.gather(*(stores[i % 2].insert_if_absent(c) for i, c in enumerate(candidates)))
        winners = [stored for stored, inserted in results if inserted]
        assert len(winners) == 1
        assert all(stored == winners[0] for stored, _ in results)
        assert await stores[1].get("same") == winners[0]

    async def test_acquire_lease_only_when_free_or_expired(self, backend: Backend) -> None:
        store = await backend.store()
        await insert_all(store, record("a1"))
        leased = await store.acquire_lease("a1", "w1", NOW, 30.0)
        assert leased is not None
        assert (leased.fence, leased.lease_owner, leased.lease_expires_at) == (1, "w1", NOW + 30)
        assert await store.get("a1") == leased
        assert await store.acquire_lease("a1", "w2", NOW + 29.9, 30.0) is None
        assert await store.acquire_lease("a1", "w1", NOW + 1, 30.0) is None  # even its holder
        taken = await store.acquire_lease("a1", "w2", NOW + 30, 30.0)  # expiry is inclusive
        assert taken is not None
        assert (taken.fence, taken.lease_owner, taken.lease_expires_at) == (2, "w2", NOW + 60)
        assert await store.get("a1") == taken
        assert await store.acquire_lease("absent", "w1", NOW, 30.0) is None

    async def test_update_is_fenced(self, backend: Backend) -> None:
        store = await backend.store()
        await insert_all(store, record("a1"))
        stale = await store.acquire_lease("a1", "w1", NOW, 10.0)
        fresh = await store.acquire_lease("a1", "w2", NOW + 11, 10.0)
        assert stale is not None and fresh is not None
        # The paused worker wakes up and tries to record a dispatch: nothing is written.
        assert not await store.update(stale.evolve(state=State.DISPATCHED, attempts=1))
        assert not await store.update(stale.evolve(fence=0, reason="guess"))
        assert await store.get("a1") == fresh
        done = fresh.evolve(state=State.DISPATCHED, attempts=1, updated_at=NOW + 12, dispatched_at=NOW)
        assert await store.update(done)
        assert await store.get("a1") == done
        # Releasing the lease is an ordinary fenced write.
        released = done.evolve(lease_owner="", lease_expires_at=0.0)
        assert await store.update(released)
        assert await store.get("a1") == released
        assert not await store.update(record("absent", fence=1))
        assert await store.get("absent") is None

    async def test_claim_due_takes_only_due_work(self, backend: Backend) -> None:
        store = await backend.store()
        unknown = State.UNKNOWN
        await insert_all(
            store,
            record("planned-free"),
            record("planned-live"),
            record("dispatched-expired", state=State.DISPATCHED),
            record("dispatched-live", state=State.DISPATCHED),
            record("unknown-due", state=unknown, next_check_at=NOW - 1),
            record("unknown-due-now", state=unknown, next_check_at=NOW),
            record("unknown-later", state=unknown, next_check_at=NOW + 1),
            record("unknown-never", state=unknown, next_check_at=None),
            record("unknown-due-live", state=unknown, next_check_at=NOW - 1),
            *(record(s.value, state=s, next_check_at=NOW - 1) for s in State if s not in _DRIVEN),
        )
        for action_id in ("planned-live", "dispatched-live", "unknown-due-live"):
            assert await store.acquire_lease(action_id, "worker", NOW - 5, 60.0)
        assert await store.acquire_lease("dispatched-expired", "dead", NOW - 100, 60.0)

        claimed = await store.claim_due("rec", NOW, 30.0, 100)
        due = {"planned-free", "dispatched-expired", "unknown-due", "unknown-due-now"}
        assert {r.action_id for r in claimed} == due
        for rec in claimed:
            assert rec.lease_owner == "rec" and rec.lease_expires_at == NOW + 30
            assert rec.fence == (2 if rec.action_id == "dispatched-expired" else 1)
            assert await store.get(rec.action_id) == rec
        assert await store.claim_due("rec2", NOW + 0.5, 30.0, 100) == []
        # Once the reconciler's own leases expire, the same work is due again.
        again = await store.claim_due("rec2", NOW + 30, 30.0, 100)
        assert {r.action_id for r in again} >= due
        assert len(await store.claim_due("rec3", NOW + 1_000, 30.0, 2)) == 2
        assert await store.claim_due("rec3", NOW + 1_000, 30.0, 0) == []

    async def test_concurrent_claims_are_disjoint(self, backend: Backend) -> None:
        one, two = await backend.store(), await backend.store()
        await insert_all(one, *(record(f"a{i:03}", created_at=float(i)) for i in range(60)))
        claims: dict[str, list[str]] = {}

        async def claimer(store: Store, owner: str) -> None:
            while batch := await store.claim_due(owner, NOW, 60.0, 7):
                claims.setdefault(owner, []).extend(r.action_id for r in batch)

        await asyncio.gather(claimer(one, "r1"), claimer(two, "r2"), claimer(one, "r3"), claimer(two, "r4"))
        every = list(itertools.chain.from_iterable(claims.values()))
        assert sorted(every) == [f"a{i:03}" for i in range(60)]  # each exactly once
        for owner, ids in claims.items():
            for action_id in ids:
                stored = await two.get(action_id)
                assert stored is not None and (stored.lease_owner, stored.fence) == (owner, 1)

    async def test_list_filters_and_pages(self, backend: Backend) -> None:
        store = await backend.store()
        records = [
            record(
                f"a{i:02}",
                created_at=float(100 + i // 3),  # ties: ordered by action_id
                run_id=f"run-{i % 2}",
                tool="pay" if i % 3 else "refund",
                state=State.CONFIRMED if i % 4 == 0 else State.PLANNED,
            )
            for i in range(25)
        ]
        await insert_all(store, *reversed(records), record("other-tenant", tenant="globex"))
        expected = [r.action_id for r in records]
        assert await list_all(store, ListQuery(tenant="acme", page_size=7)) == expected
        assert await list_all(store, ListQuery(tenant="acme", page_size=25)) == expected
        assert await list_all(store, ListQuery(tenant="globex")) == ["other-tenant"]
        assert await list_all(store, ListQuery(tenant="nobody")) == []

        def matching(state: State | None = None, run_id: str = "", tool: str = "") -> list[str]:
            return [
                r.action_id
                for r in records
                if (state is None or r.state == state)
                and (not run_id or r.run_id == run_id)
                and (not tool or r.tool == tool)
            ]

        for state, run_id, tool in [
            (State.CONFIRMED, "", ""),
            (None, "run-1", ""),
            (None, "", "refund"),
            (State.PLANNED, "run-0", "pay"),
            (State.UNKNOWN, "", ""),
        ]:
            query = ListQuery(tenant="acme", state=state, run_id=run_id, tool=tool, page_size=3)
            assert await list_all(store, query) == matching(state, run_id, tool)

        # The cursor is a position, not an offset: rows inserted behind it do not shift pages.
        first = await store.list(ListQuery(tenant="acme", page_size=10))
        await insert_all(store, record("a00-early", created_at=50.0), record("z-late", created_at=999.0))
        rest = await list_all(store, ListQuery(tenant="acme", page_size=10, after=first.next_token))
        assert [r.action_id for r in first.records] + rest == [*expected, "z-late"]
        with pytest.raises(ValueError):
            await store.list(ListQuery(tenant="acme", after="not a cursor"))

    async def test_purge_deletes_only_old_terminal_actions(self, backend: Backend) -> None:
        store = await backend.store()
        old = {s: record(f"old-{s.value}", tool="pay", state=s, created_at=100.0) for s in State}
        await insert_all(
            store,
            *old.values(),
            record("new-confirmed", tool="pay", state=State.CONFIRMED, created_at=200.0),
            record("other-tool", tool="refund", state=State.CONFIRMED, created_at=100.0),
        )
        assert await store.purge("pay", 200.0) == 2
        for state, rec in old.items():
            assert (await store.get(rec.action_id) is None) == state.terminal
        assert await store.get("new-confirmed") is not None
        assert await store.get("other-tool") is not None
        await insert_all(store, *(record(f"c{i}", tool="x", state=State.REJECTED) for i in range(3)))
        assert await store.purge("x", NOW, limit=2) == 2
        assert await store.purge("x", NOW, limit=2) == 1
        assert await store.purge("x", NOW) == 0

    async def test_record_round_trips_exactly(self, backend: Backend) -> None:
        store = await backend.store()
        rich = rich_record("rich")
        assert await store.insert_if_absent(rich) == (rich, True)
        assert await store.get("rich") == rich
        leased = await store.acquire_lease("rich", "w", NOW, 5.0)
        assert leased == rich.evolve(fence=1, lease_owner="w", lease_expires_at=NOW + 5)
        changed = leased.evolve(notes=(*rich.notes, "third"), observation=None, next_check_at=None)
        assert await store.update(changed)
        assert await (await backend.store()).get("rich") == changed
        page = await store.list(ListQuery(tenant="acme"))
        assert page.records == [changed]

    async def test_unreachable_store_fails_closed(self, backend: Backend) -> None:
        store = open_store(backend.unreachable_url)
        with pytest.raises(StoreUnavailable):
            await store.open()
        await store.close()

    async def test_unwritable_store_fails_closed(self, backend: Backend) -> None:
        store = await backend.store()
        await insert_all(store, record("kept"))
        leased = await store.acquire_lease("kept", "w", NOW, 60.0)
        assert leased is not None
        await backend.block_writes()
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: store.insert_if_absent(record("new")),
            lambda: store.insert_if_absent(record("new")),
            lambda: store.acquire_lease("kept", "w2", NOW + 100, 60.0),
            lambda: store.update(leased.evolve(state=State.DISPATCHED)),
            lambda: store.claim_due("rec", NOW + 100, 60.0, 10),
            lambda: store.purge("payments.charge", NOW),
        ]
        for attempt in attempts:
            with pytest.raises(StoreUnavailable):
                await attempt()
        await backend.unblock_writes()
        reader = await backend.store()
        assert await reader.get("new") is None
        assert await reader.get("kept") == leased
        assert (await reader.insert_if_absent(record("new")))[1]

    async def test_probe_writes_a_heartbeat_and_no_action(self, backend: Backend) -> None:
        store, replica = await backend.store(), await backend.store()
        kept = record("kept", state=State.CONFIRMED, created_at=0.0)
        await insert_all(store, kept)
        await store.probe(NOW)
        await asyncio.gather(*(s.probe(NOW + i) for i in range(5) for s in (store, replica)))
        await store.probe(NOW - 1)  # a clock that went back is no error
        assert await store.get("kept") == kept
        for tenant in ("", "acme"):
            assert await list_all(store, ListQuery(tenant=tenant)) == (["kept"] if tenant else [])
        assert await store.claim_due("rec", NOW + 1_000, 30.0, 100) == []
        await backend.block_writes()
        with pytest.raises(StoreUnavailable):
            await store.probe(NOW + 10)
        await backend.unblock_writes()
        # PostgreSQL sessions opened while blocked stay read-only: a fresh instance probes.
        await (await backend.store()).probe(NOW + 20)
        assert await (await backend.store()).get("kept") == kept
        await store.close()
        with pytest.raises(StoreUnavailable):
            await store.probe(NOW + 30)

    async def test_closed_store_is_unavailable(self, backend: Backend) -> None:
        store = await backend.store()
        await store.close()
        with pytest.raises(StoreUnavailable):
            await store.get("a1")
        with pytest.raises(StoreUnavailable):
            await store.insert_if_absent(record("a1"))

    async def test_replicas_starting_together_share_one_schema(self, backend: Backend) -> None:
        stores = [await backend.store(open_it=False) for _ in range(3)]
        await asyncio.gather(*(s.open() for s in stores))
        await insert_all(stores[0], record("a1"))
        assert [await s.get("a1") for s in stores] == [record("a1")] * 3
        # A restart re-runs the migrations as no-ops.
        await stores[2].close()
        await stores[2].open()
        assert await stores[2].get("a1") == record("a1")

    async def test_claim_due_takes_the_oldest_change_first(self, backend: Backend) -> None:
        store = await backend.store()
        # updated_at decides, ties broken by action_id; created_at and insert order do not matter.
        await insert_all(
            store,
            record("c", updated_at=300.0, created_at=1.0),
            record("a", updated_at=100.0, created_at=3.0),
            record("d", updated_at=200.0, created_at=2.0, state=State.UNKNOWN, next_check_at=NOW),
            record("b", updated_at=100.0, created_at=4.0, state=State.DISPATCHED),
        )
        first = await store.claim_due("r1", NOW, 30.0, 3)
        assert [r.action_id for r in first] == ["a", "b", "d"]
        assert [r.action_id for r in await store.claim_due("r2", NOW, 30.0, 3)] == ["c"]

    async def test_list_page_size_is_clamped(self, backend: Backend) -> None:
        store = await backend.store()
        await store.insert_many([record(f"a{i:04}", created_at=float(i)) for i in range(1_005)])
        for asked, got in [(0, 50), (-3, 50), (1, 1), (999, 999), (1_000, 1_000), (5_000, 1_000)]:
            page = await store.list(ListQuery(tenant="acme", page_size=asked))
            assert len(page.records) == got, asked
            assert page.records[0].action_id == "a0000" and page.next_token
            rest = await store.list(ListQuery(tenant="acme", page_size=1_000, after=page.next_token))
            assert rest.records[0].action_id == f"a{got:04}"
        last = await store.list(ListQuery(tenant="acme", page_size=5, after=_cursor_after("a0999")))
        assert [r.action_id for r in last.records] == [f"a{i}" for i in range(1_000, 1_005)]
        assert last.next_token == ""

    async def test_cursor_is_the_position_after_a_record(self, backend: Backend) -> None:
        store = await backend.store()
        # Same created_at: the cursor breaks the tie by action_id, never repeats or skips a row.
        await insert_all(store, *(record(f"t{i}", created_at=5.0) for i in range(4)), record("u", created_at=6.0))
        seen: list[str] = []
        query = ListQuery(tenant="acme", page_size=1)
        while True:
            page = await store.list(query)
            seen.extend(r.action_id for r in page.records)
            if not page.next_token:
                break
            assert rows.decode_cursor(page.next_token) == (page.records[-1].created_at, page.records[-1].action_id)
            query = dataclasses.replace(query, after=page.next_token)
        assert seen == ["t0", "t1", "t2", "t3", "u"]
        for bad in ("", "bm90IGEgY3Vyc29y", "%%%"):
            if bad:
                with pytest.raises(ValueError):
                    await store.list(ListQuery(tenant="acme", after=bad))

    async def test_lease_is_an_overlay_on_the_stored_record(self, backend: Backend) -> None:
        store = await backend.store()
        original = rich_record("r").evolve(state=State.DISPATCHED)
        await insert_all(store, original)
        leased = await store.acquire_lease("r", "w1", NOW, 30.0)
        # Only the lease changed; every other field reads back as written.
        assert leased == original.evolve(fence=1, lease_owner="w1", lease_expires_at=NOW + 30)
        again = await store.acquire_lease("r", "w2", NOW + 30, 30.0)
        assert again == original.evolve(fence=2, lease_owner="w2", lease_expires_at=NOW + 60)
        claimed = await store.claim_due("rec", NOW + 60, 30.0, 10)
        assert claimed == [original.evolve(fence=3, lease_owner="rec", lease_expires_at=NOW + 90)]
        # A fenced write of a record carrying stale lease fields still stores the lease it names.
        released = claimed[0].evolve(lease_owner="", lease_expires_at=0.0, reason="done")
        assert await store.update(released)
        assert await store.get("r") == released

    async def test_insert_stores_a_record_already_leased(self, backend: Backend) -> None:
        store = await backend.store()
        # A new action inserted already DISPATCHED under its lease (one durable write before sending).
        sent = record("s", state=State.DISPATCHED, fence=1, lease_owner="w", lease_expires_at=NOW + 30, attempts=1)
        assert await store.insert_if_absent(sent) == (sent, True)
        assert await store.get("s") == sent
        assert await store.acquire_lease("s", "other", NOW + 29, 30.0) is None
        assert await store.claim_due("rec", NOW + 29, 30.0, 10) == []
        assert await store.update(sent.evolve(state=State.CONFIRMED, lease_owner="", lease_expires_at=0.0))
        assert not await store.update(sent.evolve(fence=0, reason="stale"))

    async def test_insert_many_skips_existing_ids(self, backend: Backend) -> None:
        store = await backend.store()
        await insert_all(store, record("x1", reason="first"))
        await store.insert_many([record("x1", reason="second"), record("x2"), record("x3")])
        await store.insert_many([])
        assert (await store.get("x1")) == record("x1", reason="first")
        assert await list_all(store, ListQuery(tenant="acme")) == ["x1", "x2", "x3"]

    async def test_concurrent_writes_each_get_their_own_answer(self, backend: Backend) -> None:
        store = await backend.store()
        await insert_all(store, *(record(f"w{i:02}") for i in range(40)))
        leases = await asyncio.gather(*(store.acquire_lease(f"w{i:02}", "me", NOW, 30.0) for i in range(40)))
        assert all(lease is not None for lease in leases)
        # Half the updates carry a stale fence: in one batch or not, only those fail.
        updates = [
            store.update(lease.evolve(reason="ok") if i % 2 else lease.evolve(fence=0, reason="stale"))
            for i, lease in enumerate(leases)
            if lease is not None
        ]
        assert await asyncio.gather(*updates) == [bool(i % 2) for i in range(40)]
        for i in range(40):
            stored = await store.get(f"w{i:02}")
            assert stored is not None and stored.reason == ("ok" if i % 2 else "")

    async def test_provider_log_applies_each_event_once_and_keeps_lags(self, backend: Backend) -> None:
        store = await backend.store()
        claims = await asyncio.gather(
            *(store.claim_provider_event("stripe", "evt_1", "a1", "succeeded", NOW) for _ in range(5))
        )
        assert sorted(claims) == [False, False, False, False, True]  # concurrent deliveries: one wins
        assert await store.claim_provider_event("square", "evt_1", "a1", "succeeded", NOW)  # per source
        await store.forget_provider_event("stripe", "evt_1")  # a 503: the provider's retry applies it
        assert await store.claim_provider_event("stripe", "evt_1", "a1", "succeeded", NOW)
        for i, lag in enumerate((0.3, 0.1, 0.2)):
            await store.record_read_lag("stripe", NOW + i, lag)
        assert sorted(await store.read_lags("stripe")) == [0.1, 0.2, 0.3]
        assert sorted(await store.read_lags("stripe", limit=2)) == [0.1, 0.2]  # the newest two
        assert await store.read_lags("other") == []

    async def test_describe_never_shows_a_password(self, backend: Backend) -> None:
        store = await backend.store()
        assert store.describe() and "secret" not in store.describe()
        assert "secret" not in store.redacted_url()


def _cursor_after(action_id: str) -> str:
    created = float(int(action_id[1:]))
    return rows.encode_cursor(created, action_id)


_DRIVEN = (State.PLANNED, State.DISPATCHED, State.UNKNOWN)
