"""Migrations as a step of their own (docs/production.md, "Migrations and database roles"):
`effectgate migrate` with a role that owns the tables, `serve` with a role that only reads and
writes rows; a schema that is behind, a refused password and a missing database are one line and
exit 2 at start-up, with no waiting. Real PostgreSQL (a server of the test's own: roles are
cluster-wide, and the password test changes pg_hba.conf), real `effectgate` processes: `serve`
and the first `migrate` as `python -m effectgate.gateway` processes of their own, the other
`check` and `migrate` commands as forks of one process that loaded the command line once
(tests/cli_forks.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import grpc

import effectgate.gateway.store
from effectgate.v1 import gateway_pb2 as pb
from effectgate.v1.gateway_pb2_grpc import EffectGatewayStub
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests import pg
from tests.cli_forks import CliForks
from tests.harness import API_KEY, GatewayProcess
from tests.test_execute import request
from tests.test_startup import base_toml, forked, one_line_failure, run_cli, write

# What docs/production.md tells a database administrator to run (as a superuser, in the database).
GRANTS = """
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE, CREATE ON SCHEMA public TO eg_owner;
GRANT USAGE ON SCHEMA public TO eg_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE eg_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO eg_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE eg_owner IN SCHEMA public
    GRANT USAGE ON SEQUENCES TO eg_runtime;
"""

# Every migration the gateway ships (the same number in both dialects).
MIGRATIONS = len(list((Path(effectgate.gateway.store.__file__).parent / "migrations" / "sqlite").glob("*.sql")))


async def _roles(server: pg.PgServer) -> str:
    """A database `eg` with the two roles; its DSN with user USER."""
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute("CREATE ROLE eg_owner LOGIN; CREATE ROLE eg_runtime LOGIN")
        await admin.execute("CREATE DATABASE eg")
    finally:
        await admin.close()
    db = await asyncpg.connect(pg.with_database(server.dsn, "eg"))
    try:
        await db.execute(GRANTS)
    finally:
        await db.close()
    return f"postgresql://USER@127.0.0.1:{server.port}/eg"


def _toml(tmp_path: Path, dsn: str, user: str, migrate: str, api_base: str = "http://127.0.0.1:9") -> Path:
    text = base_toml(tmp_path, store=f'migrate = "{migrate}"').replace(
        f'url = "sqlite:///{tmp_path}/eg.db"', f'url = "{dsn.replace("USER", user)}"'
    )
    text = text.replace("http://127.0.0.1:9", api_base)
    return write(tmp_path, text, f"{user}-{migrate}.toml")


async def _charge(target: str) -> pb.ExecuteResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        answer: pb.ExecuteResponse = await EffectGatewayStub(channel).Execute(request(run="migrated"), timeout=20)
    return answer


async def test_migrate_as_the_owner_then_serve_as_a_role_without_ddl_rights(
    tmp_path: Path, pg_private_server: pg.PgServer, forks: CliForks
) -> None:
    dsn = await _roles(pg_private_server)
    # Before the migration: the runtime role refuses to start, whatever [store] migrate says.
    for migrate, needles in (
        (
            "never",
            (f"the schema is behind: {MIGRATIONS} migration(s) not applied", 'migrate = "never"', "effectgate migrate"),
        ),
        ("auto", ("this role may not change it", "permission denied for schema public", "effectgate migrate")),
    ):
        started = time.monotonic()
        done = await asyncio.to_thread(run_cli, "serve", "--config", str(_toml(tmp_path, dsn, "eg_runtime", migrate)))
        one_line_failure(done, "[store] postgresql://eg_runtime@", *needles)
        assert time.monotonic() - started < 30  # refused at once: no waiting for a store that answers
        refused = str(_toml(tmp_path, dsn, "eg_runtime", migrate))
        one_line_failure(await asyncio.to_thread(forked, forks, "check", "--config", refused), *needles)

    owner = str(_toml(tmp_path, dsn, "eg_owner", "never"))
    first = await asyncio.to_thread(run_cli, "migrate", "--config", owner)
    assert first.returncode == 0, first.stderr
    assert f"applied {MIGRATIONS} migration(s): 0001_actions.sql, " in first.stdout, first.stdout
    again = await asyncio.to_thread(forked, forks, "migrate", "--config", owner)
    assert again.returncode == 0 and "the schema is current; nothing to apply" in again.stdout, again

    async with StripeSimulator(api_key=API_KEY) as sim:
        for migrate in ("never", "auto"):  # a current schema is only read: no DDL either way
            config = _toml(tmp_path, dsn, "eg_runtime", migrate, sim.base_url)
            assert (await asyncio.to_thread(forked, forks, "check", "--config", str(config))).returncode == 0
            gateway = GatewayProcess(config)
            try:
                await gateway.ready()
                answer = await _charge(gateway.target)
                assert answer.action.state == pb.EFFECT_STATE_CONFIRMED, answer
            finally:
                assert await gateway.stop() == 0, "".join(gateway.output)
    # The runtime role still cannot change the schema.
    runtime = await asyncpg.connect(dsn.replace("USER", "eg_runtime"))
    try:
        try:
            await runtime.execute("CREATE TABLE intruder (x int)")
            raise AssertionError("the runtime role may create tables")
        except asyncpg.InsufficientPrivilegeError:
            pass
    finally:
        await runtime.close()


async def test_a_refused_password_and_a_missing_database_are_one_line_with_the_drivers_words(
    tmp_path: Path, pg_private_server: pg.PgServer, forks: CliForks
) -> None:
    admin = await asyncpg.connect(pg_private_server.dsn)
    try:
        await admin.execute("CREATE ROLE eg_pw LOGIN PASSWORD 'right-password-1'")
        hba = pg_private_server.data / "pg_hba.conf"
        hba.write_text("host all eg_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        await admin.execute("SELECT pg_reload_conf()")
    finally:
        await admin.close()
    base = f"127.0.0.1:{pg_private_server.port}"
    cases = {
        f"postgresql://eg_pw:wrong-password-9@{base}/postgres": (
            'InvalidPasswordError: password authentication failed for user "eg_pw"',
        ),
        f"postgresql://postgres@{base}/nosuch": ('InvalidCatalogNameError: database "nosuch" does not exist',),
    }
    for url, needles in cases.items():
        text = base_toml(tmp_path).replace(f'url = "sqlite:///{tmp_path}/eg.db"', f'url = "{url}"')
        config = str(write(tmp_path, text))
        started = time.monotonic()
        done = await asyncio.to_thread(run_cli, "serve", "--config", config)
        line = one_line_failure(done, "PostgreSQL refused the connection", *needles)
        assert "wrong-password-9" not in done.stderr + done.stdout, line
        assert time.monotonic() - started < 30  # a refusal is not waited out
        one_line_failure(await asyncio.to_thread(forked, forks, "check", "--config", config), *needles)


async def test_sqlite_with_migrate_never_refuses_a_new_file_until_migrate_ran(tmp_path: Path, forks: CliForks) -> None:
    config = str(write(tmp_path, base_toml(tmp_path, store='migrate = "never"')))
    one_line_failure(run_cli("serve", "--config", config), "the schema is behind", "effectgate migrate")
    done = forked(forks, "migrate", "--config", config)
    assert done.returncode == 0 and f"applied {MIGRATIONS} migration(s)" in done.stdout, done
    assert forked(forks, "check", "--config", config).returncode == 0
