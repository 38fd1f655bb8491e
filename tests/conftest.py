"""Shared fixtures. PostgreSQL: a throw-away server started once per session (see tests/pg.py),
or the server named by EFFECTGATE_TEST_PG_DSN, and a fresh database per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.harness import API_KEY
from tests.store_backends import Backend, PostgresBackend, SqliteBackend


def _missing(reason: str) -> None:
    # In CI a missing service is a failure: a skipped store test would hide a broken backend.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: not skipping)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_bindir() -> Path:
    bindir = pg.find_bindir()
    if bindir is None:
        _missing("PostgreSQL server binaries not found (scripts/install_test_services.sh installs them)")
    assert bindir is not None
    return bindir


@pytest.fixture(scope="session")
def pg_admin_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """DSN of a superuser (or CREATEDB) login on the session's PostgreSQL server."""
    external = os.environ.get(pg.ENV_DSN)
    if external:
        yield external
        return
    server = pg.start_server(request.getfixturevalue("pg_bindir"))
    try:
        yield server.dsn
    finally:
        server.destroy()


@pytest.fixture
async def pg_dsn(pg_admin_dsn: str) -> AsyncIterator[str]:
    """DSN of a fresh, empty database, dropped after the test."""
    name, dsn = await pg.create_database(pg_admin_dsn)
    try:
        yield dsn
    finally:
        await pg.drop_database(pg_admin_dsn, name)


@pytest.fixture
def pg_private_server(pg_bindir: Path) -> Iterator[pg.PgServer]:
    """A server of the test's own, for tests that stop or restart it."""
    server = pg.start_server(pg_bindir)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """A store backend harness on a fresh database: SQLite file or PostgreSQL database."""
    chosen: Backend
    if request.param == "sqlite":
        chosen = SqliteBackend(tmp_path)
    else:
        chosen = PostgresBackend(request.getfixturevalue("pg_admin_dsn"))
        await chosen.create()
    try:
        yield chosen
    finally:
        await chosen.aclose()


@pytest.fixture
async def sim() -> AsyncIterator[StripeSimulator]:
    """A Stripe simulator on loopback whose search shows an intent 0.3 s after it is created."""
    simulator = StripeSimulator(api_key=API_KEY, search_lag=0.3)
    await simulator.start()
    yield simulator
    await simulator.stop()
