"""A throw-away PostgreSQL server for tests, started from the Debian server binaries.

The cluster lives in a temporary directory, listens on a free port on 127.0.0.1 only (and a Unix
socket in the same directory), trusts local connections and is removed when stopped. As root (CI)
the server runs as the `postgres` user, which PostgreSQL requires.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ENV_DSN = "EFFECTGATE_TEST_PG_DSN"


def find_bindir() -> Path | None:
    """The newest installed server's bin directory (EFFECTGATE_PG_BINDIR overrides)."""
    explicit = os.environ.get("EFFECTGATE_PG_BINDIR")
    if explicit:
        return Path(explicit) if (Path(explicit) / "pg_ctl").exists() else None
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """`start()` / `stop()` / `restart()` one cluster; `dsn` names its `postgres` database."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="effectgate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            # The server refuses to run as root; the directory (0700) must be the postgres user's.
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "-N")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr}{done.stdout}\n{log}")

    def start(self) -> None:
        # No fsync (the cluster is thrown away), but synchronous_commit stays on: a commit must
        # survive a killed server (pg_ctl -m immediate), which the crash tests rely on.
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root}"
            " -c fsync=off -c full_page_writes=off -c max_connections=300"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start_server(bindir: Path, attempts: int = 3) -> PgServer:
    """Starts a fresh cluster; retries on the rare port taken between probe and bind."""
    for attempt in range(attempts):
        server = PgServer(bindir)
        try:
            server.start()
            return server
        except RuntimeError:
            server.destroy()
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


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
