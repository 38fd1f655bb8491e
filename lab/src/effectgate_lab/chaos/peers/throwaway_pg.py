"""One throw-away PostgreSQL cluster for the whole run (the lab's launcher), started on first use
and destroyed at exit; every DBOS cell gets a fresh database in it."""

from __future__ import annotations

import asyncio
import atexit
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from effectgate_lab.labkit.postgres import PgServer, find_bindir, start_server

# A cluster someone else runs (tests/pg.py's, a CI service): used instead of starting one.
DSN_ENV = "EFFECTGATE_PEERS_PG_DSN"
_server: list[PgServer] = []
_lock = asyncio.Lock()


async def admin_dsn() -> str:
    if os.environ.get(DSN_ENV):
        return os.environ[DSN_ENV]
    async with _lock:
        if not _server:
            bindir = find_bindir()
            if bindir is None:
                raise RuntimeError("no PostgreSQL server binaries (scripts/install_test_services.sh installs them)")
            # fsync on, like a deployment (and like the gateway's PostgreSQL in the bench).
            server = await asyncio.to_thread(start_server, bindir, fsync=True)
            atexit.register(server.destroy)
            _server.append(server)
    return _server[0].dsn


async def database_url() -> str:
    """A fresh, empty database: its URL as DBOS takes it."""
    dsn = await admin_dsn()
    name = f"dbos_chaos_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
