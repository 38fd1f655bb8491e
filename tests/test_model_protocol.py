"""The stateful property test (tests/model/): a Hypothesis RuleBasedStateMachine drives every door
of a real in-process gateway (Execute, provider faults, the clock, the reconciler, approvals,
operators, webhooks, crashes, reloads) and checks the invariants against the Stripe simulator's
ledger after every rule. SQLite with one gateway; PostgreSQL with two gateways on one database.

`make test` runs the bounded `model-ci` profile (derandomized: the same examples every run);
`make fuzz` runs the `model-fuzz` profile for as long as asked, with a seed printed and found
examples kept in .hypothesis/ (docs/testing.md, "The model")."""

from __future__ import annotations

import os
import uuid

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import run_state_machine_as_test

from effectgate.gateway.store import open_store
from tests import pg
from tests.model.machine import ProtocolMachine

SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "model-ci",
    max_examples=int(os.environ.get("EFFECTGATE_MODEL_EXAMPLES", "30")),
    stateful_step_count=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=SLOW_OK,
)
settings.register_profile(
    "model-fuzz",
    max_examples=int(os.environ.get("EFFECTGATE_MODEL_EXAMPLES", "500")),
    stateful_step_count=40,
    deadline=None,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    suppress_health_check=SLOW_OK,
    print_blob=True,
)
PROFILE = os.environ.get("EFFECTGATE_MODEL_PROFILE", "model-ci")


def profile(share: float = 1.0) -> settings:
    chosen = settings.get_profile(PROFILE)
    return settings(chosen, max_examples=max(1, int(chosen.max_examples * share)))


def test_the_model_on_sqlite_with_one_gateway() -> None:
    run_state_machine_as_test(ProtocolMachine, settings=profile())


class TwoGatewaysOnPostgres(ProtocolMachine):
    """Two gateways on one PostgreSQL database: every call picks one of them."""

    replicas = 2
    admin_dsn = ""

    template = ""

    async def make_store(self) -> str:
        """A database per example, copied from one migrated once (CREATE DATABASE … TEMPLATE)."""
        if not TwoGatewaysOnPostgres.template:
            name, dsn = await pg.create_database(self.admin_dsn)
            store = open_store(dsn)
            await store.open()  # applies the migrations
            await store.close()
            TwoGatewaysOnPostgres.template = name
        self.database = f"effectgate_model_{uuid.uuid4().hex[:16]}"
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f'CREATE DATABASE "{self.database}" TEMPLATE "{self.template}"')
        finally:
            await conn.close()
        return pg.with_database(self.admin_dsn, self.database)

    async def drop_store(self) -> None:
        await pg.drop_database(self.admin_dsn, self.database)


def test_the_model_on_postgres_with_two_gateways(pg_admin_dsn: str) -> None:
    TwoGatewaysOnPostgres.admin_dsn = pg_admin_dsn
    run_state_machine_as_test(TwoGatewaysOnPostgres, settings=profile(0.25))


@pytest.fixture(autouse=True)
def _no_event_loop_left() -> None:
    """The machine runs its own event loops (one per example); nothing here is async."""
