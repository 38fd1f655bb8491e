"""Store errors named by what they are (store/faults.py), on SQLite and PostgreSQL: data a store
refuses for good is `StoreDataRefused` / `StoreTextRefused` (permanent: FAILED_PRECONDITION /
INVALID_ARGUMENT), never `StoreUnavailable`; and counters stop at MAX_COUNT (2^62), a limit
grant's reservation included, so no sum of the 64-bit columns can overflow."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from effectgate.gateway.model import (
    MAX_COUNT,
    Bucket,
    BudgetExceeded,
    DataRefused,
    InvalidRequest,
    LimitGrant,
    Reservation,
)
from effectgate.gateway.store import Store, StoreDataRefused, StoreTextRefused, StoreUnavailable
from tests.store_backends import Backend, PostgresBackend, SqliteBackend, record

NOW = 10_000.0


def reservation(amount: int, budget: int = MAX_COUNT, *, forced: bool = False) -> Reservation:
    bucket = Bucket("eur", "r:run-1", amount, None, budget, "run_max_effects", "run_budget")
    return Reservation("t", "charge_card", "eur", amount, (bucket,), forced, NOW)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    backend: Backend
    if request.param == "sqlite":
        backend = SqliteBackend(tmp_path)
    else:
        backend = PostgresBackend(request.getfixturevalue("pg_admin_dsn"))
        await backend.create()
    try:
        yield await backend.store()
    finally:
        await backend.aclose()


async def test_a_number_past_64_bits_is_refused_for_good_and_logged_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="effectgate.store")
    with pytest.raises(StoreDataRefused) as caught:
        await store.claim(record("big", tenant="t"), reservation(1 << 63, budget=MAX_COUNT))
    assert isinstance(caught.value, DataRefused) and not isinstance(caught.value, StoreUnavailable)
    assert await store.get("big") is None  # nothing of the claim was written
    refused = [r for r in caplog.records if r.name == "effectgate.store"]
    assert len(refused) == 1 and "permanent" in refused[0].getMessage()
    assert str(1 << 63) not in refused[0].getMessage()  # names the error, never the data


async def test_nul_in_text_is_refused_by_postgres_and_kept_by_sqlite(store: Store) -> None:
    """Why the RPC edge refuses NUL before any store sees it: the stores disagree."""
    written = record("nul", run_id="run\x00one")
    if "postgres" in type(store).__name__.lower():
        with pytest.raises(StoreTextRefused) as caught:
            await store.insert_if_absent(written)
        assert isinstance(caught.value, InvalidRequest) and caught.value.violations[0][0] == "request"
        assert await store.get("nul") is None
    else:
        assert (await store.insert_if_absent(written))[1]


async def test_counters_stop_at_max_count_even_with_a_limit_grant(store: Store) -> None:
    # A 2^62 run budget, filled.
    assert (await store.claim(record("fill", tenant="t"), reservation(MAX_COUNT)))[1]
    assert await store.usage("t", "charge_card") == [("eur", "r:run-1", 1, MAX_COUNT)]
    # The next charge: over the budget, so an operator grants it; the grant cannot make it fit.
    with pytest.raises(BudgetExceeded) as over:
        await store.claim(record("next", tenant="t"), reservation(MAX_COUNT))
    assert over.value.figures["limit"] == "run_budget" and over.value.figures["left"] == "0"
    await store.grant_limit(LimitGrant("next", "t", "alice", "month end", NOW - 1, NOW + 60))
    with pytest.raises(BudgetExceeded) as beyond:
        await store.claim(record("next", tenant="t"), reservation(MAX_COUNT))
    figures = beyond.value.figures
    assert figures["limit"] == "max_count" and figures["max_count"] == str(MAX_COUNT)
    assert figures["spent"] == str(MAX_COUNT) and figures["amount"] == str(MAX_COUNT)
    # A bypass's reservation (counted without the check) stops there too.
    with pytest.raises(BudgetExceeded) as forced:
        await store.claim(record("bypass", tenant="t"), reservation(1, forced=True))
    assert forced.value.figures["limit"] == "max_count"
    assert await store.get("next") is None and await store.get("bypass") is None
    assert await store.usage("t", "charge_card") == [("eur", "r:run-1", 1, MAX_COUNT)]
    # The grant was not used up by the refused claims: its rollback took the use back.
    assert await store.release_reservation("fill", 0)
    assert (await store.claim(record("next", tenant="t"), reservation(MAX_COUNT, budget=1)))[1]
    assert [e.kind for e in await store.history("next")][-1] == "limit_grant"
