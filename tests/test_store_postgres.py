"""PostgreSQL-only store behaviour: migrations, row locks, server loss and recovery."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from effectgate.gateway.model.domain import ListQuery, State
from effectgate.gateway.store import StoreUnavailable, open_store
from effectgate.gateway.store.postgres import PostgresStore, migrations
from tests import pg
from tests.store_backends import record, rich_record

NOW = 10_000.0


async def test_concurrent_starts_apply_each_migration_once(pg_dsn: str) -> None:
    stores = [open_store(pg_dsn) for _ in range(5)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
    finally:
        for store in stores:
            await store.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        applied = [(r["version"], r["name"]) for r in await conn.fetch("SELECT * FROM schema_migrations")]
        indexes = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
    finally:
        await conn.close()
    assert sorted(applied) == [(m.version, m.name) for m in migrations()]
    assert applied[0] == (1, "0001_actions.sql")
    assert {
        "actions_state_next_check",
        "actions_state_lease",
        "actions_tenant_created",
        "actions_tenant_run_created",
        "actions_tool_created",
    } <= indexes
    assert "actions_run" not in indexes  # dropped by 0003: the tenant-and-run index serves it


async def test_postgres_scheme_alias(pg_dsn: str) -> None:
    store = open_store(pg_dsn.replace("postgresql://", "postgres://", 1))
    await store.open()
    try:
        assert (await store.insert_if_absent(record("a1")))[1]
    finally:
        await store.close()


async def test_claim_due_skips_rows_locked_elsewhere(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    other = await asyncpg.connect(pg_dsn)
    try:
        for action_id in ("a1", "a2"):
            await store.insert_if_absent(record(action_id))
        async with other.transaction():
            await other.execute("SELECT 1 FROM actions WHERE action_id = 'a1' FOR UPDATE")
            claimed = await asyncio.wait_for(store.claim_due("rec", NOW, 30.0, 10), 2.0)
            assert [r.action_id for r in claimed] == ["a2"]
    finally:
        await other.close()
        await store.close()


async def test_stalled_statement_fails_closed(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, command_timeout=0.3)
    await store.open()
    other = await asyncpg.connect(pg_dsn)
    try:
        await store.insert_if_absent(record("a1"))
        leased = await store.acquire_lease("a1", "w", NOW, 30.0)
        assert leased is not None
        async with other.transaction():
            await other.execute("SELECT 1 FROM actions WHERE action_id = 'a1' FOR UPDATE")
            with pytest.raises(StoreUnavailable):
                await store.update(leased.evolve(reason="blocked"))
        assert await store.get("a1") == leased
    finally:
        await other.close()
        await store.close()


async def test_server_loss_fails_closed_and_recovers(pg_restartable_server: pg.PgServer) -> None:
    name, dsn = await pg.create_database(pg_restartable_server.dsn)
    store = PostgresStore(dsn, connect_timeout=1.0)
    await store.open()
    try:
        await store.insert_if_absent(record("before"))
        pg_restartable_server.stop("immediate")
        with pytest.raises(StoreUnavailable):
            await store.insert_if_absent(record("during"))
        with pytest.raises(StoreUnavailable):
            await store.get("before")
        pg_restartable_server.start()
        # The pool replaces its dead connections; no restart of the store is needed.
        async with asyncio.timeout(10):
            while True:
                try:
                    assert (await store.insert_if_absent(record("after")))[1]
                    break
                except StoreUnavailable:
                    await asyncio.sleep(0.1)
        assert await store.get("before") is not None
        assert await store.get("during") is None
    finally:
        await store.close()
        await pg.drop_database(pg_restartable_server.dsn, name)


async def test_url_options_are_the_gateways_not_the_servers(pg_dsn: str) -> None:
    """Pool and statement-cache options are read from the URL, not sent to PostgreSQL as settings
    (which would refuse them); `statement_cache_size=0` is what PgBouncer's transaction mode needs."""
    separator = "&" if "?" in pg_dsn else "?"
    store = PostgresStore.from_url(f"{pg_dsn}{separator}statement_cache_size=0&pool_max=2&command_timeout=5")
    await store.open()
    try:
        stored = rich_record("opts")
        _, inserted = await store.insert_if_absent(stored)
        assert inserted and await store.get(stored.action_id) == stored
    finally:
        await store.close()
    with pytest.raises(ValueError, match="must be numbers"):
        PostgresStore.from_url(f"{pg_dsn}{separator}pool_max=many")


async def test_each_primitive_is_one_round_trip(pg_dsn: str) -> None:
    """One statement per primitive and nothing else on the wire: no reset query when a pooled
    connection goes back (the store keeps no session state)."""
    store = PostgresStore(pg_dsn, min_size=1, max_size=1)
    await store.open()
    sent: list[str] = []
    try:
        async with store._conn() as conn:
            conn.add_query_logger(lambda q: sent.append(q.query))
        leased = record("a1").evolve(fence=1, lease_owner="w", lease_expires_at=NOW + 30)
        assert (await store.insert_if_absent(leased))[1]
        assert await store.get("a1") == leased
        assert await store.update(leased.evolve(lease_owner="", lease_expires_at=0.0, reason="done"))
        assert await store.acquire_lease("a1", "w2", NOW, 30.0) is not None
        assert len(await store.claim_due("rec", NOW + 100, 30.0, 5)) == 1
        assert [q.split()[0] for q in sent] == ["INSERT", "SELECT", "UPDATE", "UPDATE", "WITH"]
    finally:
        await store.close()


async def test_hot_statements_use_indexes(pg_dsn: str) -> None:
    """With mostly settled actions (the steady state), the protocol's statements never scan the
    table: point writes by key, due work through the state indexes, pages in index order."""
    store = PostgresStore(pg_dsn)
    await store.open()
    conn = await asyncpg.connect(pg_dsn)
    try:
        settled = [record(f"c{i:05}", state=State.CONFIRMED, created_at=float(i)) for i in range(5_000)]
        await store.insert_many([*settled, record("open", state=State.DISPATCHED)])
        await conn.execute("ANALYZE actions")
        q = PostgresStore.statements
        statements = [
            (q.get, ("c00001",)),
            (q.acquire, ("o", 1.0, "c00001", 0.0)),
            (q.update, (*("x",) * 4, "", 0.0, None, 1.0, 1.0, "{}", "c00001", 1)),
            (q.claim, (NOW, NOW, 10, "o", 1.0)),
            q.list(ListQuery(tenant="acme"), 50),
            q.list(ListQuery(tenant="acme", state=State.UNKNOWN), 50),
            q.list(ListQuery(tenant="acme", run_id="run-1"), 50),
        ]
        for sql, params in statements:
            # EXPLAIN without ANALYZE plans a write without running it.
            plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {sql}", *params))
            assert "Seq Scan on actions" not in plan, (sql, plan)
            assert "Index" in plan, (sql, plan)
    finally:
        await conn.close()
        await store.close()
