"""Rows written by an earlier version load unchanged: tests/fixtures/store_548605c.sql holds rows
that the store of commit 548605c wrote (untagged JSON bodies, no migrations table on SQLite)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import asyncpg

from effectgate.gateway.model.domain import ActionRecord, ListQuery, State
from effectgate.gateway.store import codec, rows, schema
from effectgate.gateway.store.sql_primitives import POSTGRES
from tests.store_backends import Backend, PostgresBackend, SqliteBackend, rich_record

FIXTURE = Path(__file__).parent / "fixtures" / "store_548605c.sql"


def legacy_inserts() -> list[str]:
    return [line for line in FIXTURE.read_text().splitlines() if line.startswith('INSERT INTO "actions"')]


async def seed(backend: Backend) -> None:
    """The database exactly as the old store left it."""
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path)
        conn.executescript("\n".join(line for line in FIXTURE.read_text().splitlines() if not line.startswith("--")))
        conn.close()
        return
    assert isinstance(backend, PostgresBackend)
    conn = await asyncpg.connect(backend.dsn)
    try:
        # The old store's migration procedure: its table of migrations, then 0001 (unchanged since).
        await conn.execute(schema.SCHEMA_MIGRATIONS["postgres"])
        await conn.execute(schema.load("postgres")[0].sql)
        await conn.execute("INSERT INTO schema_migrations (version, name) VALUES (1, '0001_actions.sql')")
        for insert in legacy_inserts():
            await conn.execute(insert)
    finally:
        await conn.close()


async def raw_body(backend: Backend, action_id: str) -> str:
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path)
        try:
            return str(conn.execute("SELECT body FROM actions WHERE action_id = ?", (action_id,)).fetchone()[0])
        finally:
            conn.close()
    pg = await asyncpg.connect(backend.url)
    try:
        return str(await pg.fetchval("SELECT body FROM actions WHERE action_id = $1", action_id))
    finally:
        await pg.close()


async def test_rows_of_the_previous_version_load(backend: Backend) -> None:
    await seed(backend)
    assert all("schema_version" not in line for line in legacy_inserts())
    store = await backend.store()  # applies the migrations the old database lacks
    assert await store.get("legacy-rich") == rich_record("legacy-rich")
    leased = await store.get("legacy-leased")
    assert leased is not None and leased.state is State.DISPATCHED
    assert (leased.fence, leased.lease_owner, leased.lease_expires_at) == (1, "old-worker", 2030.0)
    unknown = await store.get("legacy-unknown")
    assert unknown is not None and unknown.state is State.UNKNOWN and unknown.next_check_at == 1600.0
    assert unknown.reason == "read-back inconclusive" and unknown.checks == 2

    listed = await store.list(ListQuery(tenant="acme"))
    assert [r.action_id for r in listed.records] == ["legacy-planned", "legacy-leased", "legacy-unknown", "legacy-rich"]
    claimed = await store.claim_due("new-worker", 2_100.0, 30.0, 10)
    # Oldest change first (updated_at 1000, 1000, 1510), ties by id.
    assert [r.action_id for r in claimed] == ["legacy-leased", "legacy-planned", "legacy-unknown"]

    # The next write re-encodes the record at the current schema version.
    moved = claimed[0].evolve(state=State.CONFIRMED, lease_owner="", lease_expires_at=0.0, updated_at=2_101.0)
    assert await store.update(moved)
    body = json.loads(await raw_body(backend, "legacy-leased"))
    assert body["schema_version"] == codec.SCHEMA_VERSION
    assert await (await backend.store()).get("legacy-leased") == moved


# The row the readiness probe wrote into the actions table before migration 0004 gave it its own.
OLD_PROBE = ActionRecord(
    action_id="effectgate-readiness-probe",
    tenant="",
    run_id="",
    step_id="",
    tool="__readiness_probe__",
    scope="",
    payload_type="",
    payload=b"",
    fingerprint="",
    state=State.CONFIRMED,
    created_at=1000.0,
    updated_at=1000.0,
    fence=7,
)


async def test_the_old_probe_row_is_removed(backend: Backend) -> None:
    await seed(backend)
    marks = ", ".join("?" * len(rows.COLUMNS))
    insert = f"INSERT INTO actions ({', '.join(rows.COLUMNS)}) VALUES ({marks})"
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path)
        conn.execute(insert, rows.values(OLD_PROBE))
        conn.commit()
        conn.close()
    else:
        assert isinstance(backend, PostgresBackend)
        pg = await asyncpg.connect(backend.dsn)
        await pg.execute(POSTGRES.render(insert), *rows.values(OLD_PROBE))
        await pg.close()
    store = await backend.store()  # applies the migrations the old database lacks
    assert await store.get(OLD_PROBE.action_id) is None
    assert len((await store.list(ListQuery(tenant="acme"))).records) == 4  # the actions stay


async def test_migrations_are_recorded_once_per_version(backend: Backend) -> None:
    await seed(backend)
    await backend.store()
    await backend.store()
    dialect = "sqlite" if isinstance(backend, SqliteBackend) else "postgres"
    expected = [(m.version, m.name) for m in schema.load(dialect)]
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path)
        applied = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
        conn.close()
    else:
        pg = await asyncpg.connect(backend.url)
        applied = [tuple(r) for r in await pg.fetch("SELECT version, name FROM schema_migrations ORDER BY version")]
        await pg.close()
    assert applied == expected
    assert [v for v, _ in expected] == list(range(1, len(expected) + 1))
