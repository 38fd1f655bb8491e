"""The store conformance suite, part two: an action's story (`action_events`, written in the
transaction of the change it tells), the approval queue and the change feed (migration 0005)."""

from __future__ import annotations

import asyncio

from effectgate.gateway.model.domain import ActionEvent, ListQuery, State
from effectgate.gateway.store import rows
from tests.store_backends import Backend, record


def event(action_id: str, kind: str, state: State, at: float = 1_000.0, **extra: object) -> ActionEvent:
    return ActionEvent(action_id=action_id, at=at, kind=kind, state=state, **extra)  # type: ignore[arg-type]


class StoryConformance:
    async def test_events_are_written_with_their_change_and_only_then(self, backend: Backend) -> None:
        store = await backend.store()
        first = record("s1", state=State.AWAITING_APPROVAL)
        assert (await store.insert_if_absent(first, event("s1", "claim", State.AWAITING_APPROVAL)))[1]
        # A lost insert writes no event.
        assert not (await store.insert_if_absent(first, event("s1", "claim", State.PLANNED)))[1]
        leased = await store.acquire_lease("s1", "w", 1_001.0, 30.0)
        assert leased is not None
        denied = leased.evolve(state=State.REJECTED, reason="denied by ops: no", updated_at=1_002.0)
        entry = event("s1", "deny", State.REJECTED, 1_002.0, principal="ops", note="no", detail={"a": [1, "\u00fc"]})
        assert await store.update(denied, entry)
        # A fenced-out write writes no event either.
        assert not await store.update(leased.evolve(fence=leased.fence - 1), event("s1", "approve", State.PLANNED))
        story = await store.history("s1")
        assert [(e.kind, e.state, e.principal, e.note) for e in story] == [
            ("claim", State.AWAITING_APPROVAL, "", ""),
            ("deny", State.REJECTED, "ops", "no"),
        ]
        assert story[1].detail == {"a": [1, "\u00fc"]} and story[1].at == 1_002.0
        assert story[0].seq < story[1].seq
        assert await store.history("absent") == []

    async def test_retention_purges_the_story_with_the_action(self, backend: Backend) -> None:
        store = await backend.store()
        for name, state in (("old", State.CONFIRMED), ("waiting", State.AWAITING_APPROVAL)):
            await store.insert_if_absent(record(name, state=state, created_at=1.0), event(name, "claim", state))
        assert await store.purge("payments.charge", 2.0) == 1
        assert await store.get("old") is None and await store.history("old") == []
        assert len(await store.history("waiting")) == 1

    async def test_awaiting_lists_the_waiting_actions_of_one_tool_oldest_first(self, backend: Backend) -> None:
        store = await backend.store()
        for i, (state, tool) in enumerate(
            [
                (State.AWAITING_APPROVAL, "payments.charge"),
                (State.PLANNED, "payments.charge"),
                (State.AWAITING_APPROVAL, "other"),
                (State.AWAITING_APPROVAL, "payments.charge"),
            ]
        ):
            await store.insert_if_absent(record(f"w{i}", state=state, tool=tool, created_at=100.0 - i))
        found = await store.awaiting("payments.charge", 100.0, 10)
        assert [r.action_id for r in found] == ["w3"]  # w0 was created at 100.0: not before
        assert [r.action_id for r in await store.awaiting("payments.charge", 101.0, 10)] == ["w3", "w0"]
        assert await store.awaiting("payments.charge", 101.0, 0) == []

    async def test_changes_follow_updated_at_after_a_cursor(self, backend: Backend) -> None:
        stores = [await backend.store(), await backend.store()]
        await stores[0].insert_if_absent(record("c1", updated_at=10.0))
        await stores[1].insert_if_absent(record("c2", updated_at=11.0, run_id="run-2"))
        await stores[0].insert_if_absent(record("c3", updated_at=11.0, tenant="globex"))
        everything = await stores[1].changes(ListQuery(tenant="acme"))
        assert [r.action_id for r in everything] == ["c1", "c2"]
        after_first = rows.encode_cursor(10.0, "c1")
        assert [r.action_id for r in await stores[1].changes(ListQuery(tenant="acme", after=after_first))] == ["c2"]
        leased = await stores[0].acquire_lease("c1", "w", 12.0, 30.0)
        assert leased is not None
        await stores[0].update(leased.evolve(state=State.CONFIRMED, updated_at=12.0))
        later = rows.encode_cursor(11.0, "c2")
        changed = await stores[1].changes(ListQuery(tenant="acme", after=later))
        assert [(r.action_id, r.state) for r in changed] == [("c1", State.CONFIRMED)]
        assert [r.action_id for r in await stores[1].changes(ListQuery(tenant="acme", run_id="run-2"))] == ["c2"]
        filtered = await stores[1].changes(ListQuery(tenant="acme", state=State.CONFIRMED, tool="payments.charge"))
        assert [r.action_id for r in filtered] == ["c1"]
        assert len(await stores[1].changes(ListQuery(tenant="acme", page_size=1))) == 1

    async def test_concurrent_logged_updates_keep_one_story_per_winner(self, backend: Backend) -> None:
        store = await backend.store()
        await store.insert_if_absent(
            record("race", state=State.AWAITING_APPROVAL), event("race", "claim", State.AWAITING_APPROVAL)
        )
        leased = await store.acquire_lease("race", "w", 1_001.0, 30.0)
        assert leased is not None
        attempts = [leased.evolve(state=State.REJECTED, updated_at=1_002.0 + i) for i in range(10)]
        results = await asyncio.gather(
            *(store.update(a, event("race", "deny", State.REJECTED, a.updated_at)) for a in attempts)
        )
        # Same fence: every write is allowed (the fence only stops stale holders) and each one is told.
        assert len(await store.history("race")) == 1 + sum(results)
