"""The audit trail (issue 34): ListEvents through a real gateway, and the per-tenant hash chain on
SQLite and PostgreSQL — two gateways writing at once on one PostgreSQL, a row edited or removed
by hand (named by `audit verify`), a retention purge (still verifies)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from effectgate.gateway.model import EventQuery
from effectgate.gateway.model.domain import ActionEvent, State
from effectgate.gateway.store import Store, rows, schema, verify_chain
from effectgate.gateway.store.action_events import EVENT_COLUMNS, event_values
from effectgate.gateway.store.trail.chain import canonical, link
from effectgate.tools.v1 import tools_pb2
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.harness import LiveGateway, config_doc, start_gateway, stripe_tools
from tests.store_backends import Backend, PostgresBackend, SqliteBackend, record
from tests.test_execute import details, request

TOKENS = {
    ("acme", "agent"): "tok-acme-agent",
    ("acme", "operator"): "tok-acme-ops",
    ("globex", "agent"): "tok-globex-agent",
    ("globex", "operator"): "tok-globex-ops",
}


def principals() -> list[dict[str, Any]]:
    return [
        {
            "name": f"{tenant}-{role}",
            "tenant": tenant,
            "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
            "roles": [role],
        }
        for (tenant, role), token in TOKENS.items()
    ]


def auth(tenant: str, role: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[(tenant, role)]}"),)


def doc(url: str, sim: StripeSimulator, **tool: Any) -> dict[str, Any]:
    return config_doc(url, principals=principals(), **stripe_tools(sim.base_url, **tool))


def charge(step: str, amount: int = 1000) -> pb.ExecuteRequest:
    payload = tools_pb2.ChargeCard(customer="cus_7", amount=amount, currency="usd", payment_method="pm_card_visa")
    return request(step=step, scope=f"order:{step}", payload=payload, call=f"c-{step}")


async def all_events(live: LiveGateway, tenant: str, **filters: Any) -> list[pb.TrailEvent]:
    found: list[pb.TrailEvent] = []
    token = ""
    while True:
        page = await live.stub.ListEvents(
            pb.ListEventsRequest(page_token=token, page_size=3, **filters), metadata=auth(tenant, "operator")
        )
        token = page.next_page_token
        if not page.events:
            return found
        found += page.events


async def tamper(backend: Backend, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Raw SQL on the store's database, as a person with access to it would run it."""
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path, isolation_level=None)
        try:
            for sql, params in statements:
                conn.execute(sql, params)
        finally:
            conn.close()
        return
    assert isinstance(backend, PostgresBackend)
    pg = await asyncpg.connect(backend.dsn)
    try:
        for sql, params in statements:
            numbered = sql
            for i in range(1, sql.count("?") + 1):
                numbered = numbered.replace("?", f"${i}", 1)
            await pg.execute(numbered, *params)
    finally:
        await pg.close()


async def test_list_events_pages_filters_and_keeps_tenants_apart(backend: Backend, sim: StripeSimulator) -> None:
    live = await start_gateway(doc(backend.url, sim))
    try:
        for step in ("a", "b", "c"):
            answer = await live.stub.Execute(charge(step), metadata=auth("acme", "agent"))
            assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
        other = await live.stub.Execute(charge("g"), metadata=auth("globex", "agent"))
        acme = await all_events(live, "acme")
        ids = {e.action_id for e in acme}
        assert len(ids) == 3 and other.action.action_id not in ids
        # Chain order: positions 1, 2, ... each linked to the one before, each checkable by hand.
        assert [e.position for e in acme] == list(range(1, len(acme) + 1))
        prev = ""
        for e in acme:
            values = (e.action_id, e.at_seconds, e.event.kind, pb.EffectState.Name(e.event.state)[13:])
            canon = canonical((*values, e.event.principal, e.event.note, e.detail_json), e.tenant, e.tool)
            assert e.prev_hash == prev and e.hash == link(prev, canon)
            prev = e.hash
        assert {e.tenant for e in acme} == {"acme"} and {e.tool for e in acme} == {"charge_card"}
        globex = await all_events(live, "globex")
        assert {e.action_id for e in globex} == {other.action.action_id} and globex[0].position == 1
        # Filters: kind, tool, principal, time.
        claims = await all_events(live, "acme", kind="claim")
        assert len(claims) == 3 and {e.event.kind for e in claims} == {"claim"}
        assert await all_events(live, "acme", tool="refund") == []
        assert await all_events(live, "acme", principal="nobody") == []
        middle = acme[len(acme) // 2].event.at
        later = await all_events(live, "acme", since=middle)
        assert later and all(e.event.at.ToNanoseconds() >= middle.ToNanoseconds() for e in later)
        assert len(later) < len(acme)
        # An empty page answers the token it was asked with: polling it follows the trail.
        last = await live.stub.ListEvents(pb.ListEventsRequest(page_size=1000), metadata=auth("acme", "operator"))
        tail = await live.stub.ListEvents(
            pb.ListEventsRequest(page_token=last.next_page_token), metadata=auth("acme", "operator")
        )
        assert not tail.events and tail.next_page_token == last.next_page_token
        await live.stub.Execute(charge("d"), metadata=auth("acme", "agent"))
        newer = await live.stub.ListEvents(
            pb.ListEventsRequest(page_token=last.next_page_token), metadata=auth("acme", "operator")
        )
        assert newer.events and newer.events[0].position == len(acme) + 1
    finally:
        await live.close()


async def test_list_events_refuses_bad_tokens_and_agents(tmp_path: Path, sim: StripeSimulator) -> None:
    live = await start_gateway(doc(f"sqlite:///{tmp_path}/eg.db", sim))
    try:
        for token in ("not-a-token", "ZTEyLng=", "e1.2"):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await live.stub.ListEvents(pb.ListEventsRequest(page_token=token), metadata=auth("acme", "operator"))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            violations = details(caught.value)["BadRequest"].field_violations
            assert [v.field for v in violations] == ["page_token"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.ListEvents(pb.ListEventsRequest(page_size=-1), metadata=auth("acme", "operator"))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.stub.ListEvents(pb.ListEventsRequest(), metadata=auth("acme", "agent"))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await live.close()


async def test_two_gateways_on_one_postgres_write_one_chain(pg_dsn: str, sim: StripeSimulator) -> None:
    first, second = await start_gateway(doc(pg_dsn, sim)), await start_gateway(doc(pg_dsn, sim))
    try:
        calls = [
            gw.stub.Execute(charge(f"s{i}-{n}"), metadata=auth("acme", "agent"))
            for i, gw in enumerate((first, second))
            for n in range(12)
        ]
        answers = await asyncio.gather(*calls)
        assert {a.action.state for a in answers} == {pb.EFFECT_STATE_CONFIRMED}
        verdict = await verify_chain(first.gateway.store)
        assert verdict.broken is None, verdict.broken
        events = await all_events(second, "acme")
        assert verdict.rows == len(events) >= 24 * 2
        assert [e.position for e in events] == list(range(1, len(events) + 1))
    finally:
        await first.close()
        await second.close()


async def chained_store(backend: Backend, sim: StripeSimulator) -> tuple[LiveGateway, list[pb.TrailEvent]]:
    live = await start_gateway(doc(backend.url, sim))
    for step in ("a", "b", "c"):
        await live.stub.Execute(charge(step), metadata=auth("acme", "agent"))
    await live.stub.Execute(charge("g"), metadata=auth("globex", "agent"))
    return live, await all_events(live, "acme")


async def test_verify_names_an_edited_row(backend: Backend, sim: StripeSimulator) -> None:
    live, events = await chained_store(backend, sim)
    try:
        assert (await verify_chain(live.gateway.store)).broken is None
        edited = events[3]
        await tamper(backend, ("UPDATE action_events SET detail = ? WHERE seq = ?", ('{"amount":1}', edited.event.seq)))
        broken = (await verify_chain(live.gateway.store)).broken
        assert broken is not None
        assert (broken.tenant, broken.seq, broken.n) == ("acme", edited.event.seq, edited.position)
        assert broken.problem == "hash does not match the row" and broken.found == edited.hash
    finally:
        await live.close()


async def test_verify_names_the_row_after_a_removed_one(backend: Backend, sim: StripeSimulator) -> None:
    live, events = await chained_store(backend, sim)
    try:
        # The last row removed: the head was advanced past it.
        last = events[-1]
        await tamper(backend, ("DELETE FROM action_events WHERE seq = ?", (last.event.seq,)))
        broken = (await verify_chain(live.gateway.store)).broken
        assert broken is not None and broken.tenant == "acme"
        assert broken.problem == f"the chain ends at position {last.position - 1} but its head is at {last.position}"
        assert (broken.expected, broken.found) == (last.hash, last.prev_hash)
        # A row in the middle removed: the row after the gap is named.
        gone, after = events[2], events[3]
        await tamper(backend, ("DELETE FROM action_events WHERE seq = ?", (gone.event.seq,)))
        broken = (await verify_chain(live.gateway.store)).broken
        assert broken is not None
        assert (broken.seq, broken.n) == (after.event.seq, after.position)
        assert broken.problem == f"position {gone.position} is missing"
    finally:
        await live.close()


async def _purgeable(store: Store, name: str, state: State, created_at: float) -> None:
    rec = record(name, state=state, created_at=created_at)
    await store.insert_if_absent(rec, ActionEvent(name, created_at, "claim", state, detail={"n": name}))


async def test_a_purge_keeps_the_chain_verifiable(backend: Backend) -> None:
    store = await backend.store()
    await _purgeable(store, "old-1", State.CONFIRMED, 1.0)
    await _purgeable(store, "old-2", State.REJECTED, 2.0)
    await _purgeable(store, "kept", State.AWAITING_APPROVAL, 3.0)
    await _purgeable(store, "old-3", State.CONFIRMED, 4.0)
    await _purgeable(store, "new", State.CONFIRMED, 500.0)
    assert await store.purge("payments.charge", 100.0) == 3
    # The prefix whose actions are all gone is pruned; old-3's event waits behind the kept one's.
    (ends,) = await store.chain_ends()
    assert (ends.anchor_n, ends.head_n) == (2, 5)
    left = [e.event.action_id for e in await store.chain_rows("acme", 0, 100)]
    assert left == ["kept", "old-3", "new"]
    verdict = await verify_chain(store)
    assert verdict.broken is None and verdict.rows == 3
    # The kept action goes too: the rest of the prefix follows, and the anchor moves with it.
    kept = await store.acquire_lease("kept", "w", 10.0, 30.0)
    assert kept is not None
    assert await store.update(kept.evolve(state=State.REJECTED), ActionEvent("kept", 10.0, "deny", State.REJECTED))
    assert await store.purge("payments.charge", 100.0) == 1
    # Up to the kept action's last event, which sits after `new`'s and waits behind it.
    assert [e.event.action_id for e in await store.chain_rows("acme", 0, 100)] == ["new", "kept"]
    (ends,) = await store.chain_ends()
    assert (ends.anchor_n, ends.head_n) == (4, 6) and (await verify_chain(store)).broken is None
    # A pruned chain still names an edit.
    await tamper(backend, ("UPDATE action_events SET note = ? WHERE action_id = ?", ("edited", "new")))
    broken = (await verify_chain(store)).broken
    assert broken is not None and broken.problem == "hash does not match the row"


def toml(document: dict[str, Any], prefix: str = "") -> str:
    """A config document as TOML (tables of scalars and lists of strings; lists of tables)."""
    scalars, tables = [], []
    for key, value in document.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            tables.append(f"\n[{name}]\n" + toml(value, name))
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            tables += [f"\n[[{name}]]\n" + toml(item, name) for item in value]
        else:
            scalars.append(f"{key} = {json.dumps(value)}")
    return "\n".join(scalars) + "".join(tables)


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode is not None
    return child.returncode, out.decode()


async def test_rows_from_before_the_chain_stay_and_the_chain_starts_after_them(backend: Backend) -> None:
    """A store migrated to 0008 with events in it: they keep n = 0 (counted, not checked) and
    get their tenant and tool; the chain starts at position 1 after them."""
    earlier = [
        m for m in schema.load("postgres" if isinstance(backend, PostgresBackend) else "sqlite") if m.version < 9
    ]
    old = record("legacy", state=State.CONFIRMED)
    story = [ActionEvent("legacy", 1.0, "claim", State.PLANNED), ActionEvent("legacy", 2.0, "receipt", State.CONFIRMED)]
    inserts = [
        (
            "INSERT INTO actions (" + ", ".join(rows.COLUMNS) + ") VALUES (" + ", ".join("?" * len(rows.COLUMNS)) + ")",
            rows.values(old),
        )
    ]
    inserts += [
        ("INSERT INTO action_events (" + EVENT_COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?)", event_values(e))
        for e in story
    ]
    if isinstance(backend, SqliteBackend):
        conn = sqlite3.connect(backend.path, isolation_level=None)
        conn.execute(schema.SCHEMA_MIGRATIONS["sqlite"])
        for migration in earlier:
            for statement in migration.statements():
                conn.execute(statement)
            conn.execute(schema.RECORD, (migration.version, migration.name))
        conn.close()
    else:
        assert isinstance(backend, PostgresBackend)
        pg = await asyncpg.connect(backend.dsn)
        await pg.execute(schema.SCHEMA_MIGRATIONS["postgres"])
        for migration in earlier:
            await pg.execute(migration.sql)
            await pg.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
            )
        await pg.close()
    await tamper(backend, *inserts)
    store = await backend.store()
    page = await store.events(EventQuery(tenant="acme"))
    assert [(e.n, e.event.kind, e.tool) for e in page.events] == [
        (0, "claim", "payments.charge"),
        (0, "receipt", "payments.charge"),
    ]
    fresh = record("fresh")
    await store.insert_if_absent(fresh, ActionEvent("fresh", 3.0, "claim", State.PLANNED))
    verdict = await verify_chain(store)
    assert (verdict.broken, verdict.rows, verdict.unchained) == (None, 1, 2)
    after = await store.events(EventQuery(tenant="acme", after=page.next_token))
    assert [(e.n, e.event.action_id, e.prev_hash) for e in after.events] == [(1, "fresh", "")]


async def test_the_chain_holds_through_the_limits_transactions(backend: Backend, sim: StripeSimulator) -> None:
    """A tool with limits writes its events inside the claim's and the update's transactions
    (store/accounting.py scripts, the chain's head locked last): the chain verifies, and a
    refused claim leaves no position behind."""
    live = await start_gateway(doc(backend.url, sim, limits={"budget": {"usd": 2500}, "window": "1h"}))
    try:
        for step in ("a", "b"):
            answer = await live.stub.Execute(charge(step), metadata=auth("acme", "agent"))
            assert answer.action.state == pb.EFFECT_STATE_CONFIRMED
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await live.stub.Execute(charge("c"), metadata=auth("acme", "agent"))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        verdict = await verify_chain(live.gateway.store)
        assert verdict.broken is None, verdict.broken
        events = await all_events(live, "acme")
        assert verdict.rows == len(events) and [e.position for e in events] == list(range(1, len(events) + 1))
        assert {e.event.kind for e in events} >= {"claim"}
    finally:
        await live.close()
