"""A throw-away PostgreSQL server for tests (the lab's launcher, shared with the benchmarks) and
a fresh database per test."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from effectgate_lab.labkit.postgres import PgServer, find_bindir, start_server

__all__ = ["ENV_DSN", "PgServer", "create_database", "drop_database", "find_bindir", "start_server"]

ENV_DSN = "EFFECTGATE_TEST_PG_DSN"


def with_database(dsn: str, name: str) -> str:
    """`dsn` pointing at database `name` instead."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


async def create_database(admin_dsn: str) -> tuple[str, str]:
    """Creates a uniquely named empty database; returns (name, its DSN)."""
    name = f"effectgate_test_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name, with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
