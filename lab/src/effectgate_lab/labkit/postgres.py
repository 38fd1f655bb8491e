"""A throw-away PostgreSQL server, started from the Debian server binaries (tests, benchmarks).

The cluster lives in a temporary directory, listens on a free port on 127.0.0.1 only (and a Unix
socket in the same directory), trusts local connections and is removed when stopped. As root (CI)
the server runs as the `postgres` user, which PostgreSQL requires.

With `tcp=False` it listens on its Unix socket only, and `dsn` names that socket: an address no
other process on the machine can take, so the server can be stopped and started again while its
clients keep their DSN (a TCP port freed by the stop may be taken by anyone before the start).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

from effectgate_lab.labkit.children import free_port


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


class PgServer:
    """`start()` / `stop()` / `restart()` one cluster; `dsn` names its `postgres` database.
    With `template` (the data directory of a cluster never started, e.g. another PgServer's
    `data`), the cluster is a copy of it instead of a new initdb (tests make many). With
    `tcp=False` no TCP listener: `dsn` names the Unix socket in `root` (see the module's text)."""

    def __init__(self, bindir: Path, *, fsync: bool = False, template: Path | None = None, tcp: bool = True) -> None:
        self.bindir = bindir
        self.fsync = fsync
        self.tcp = tcp
        self.root = Path(tempfile.mkdtemp(prefix="effectgate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        # Without TCP the port only names the socket file (.s.PGSQL.<port>) in a directory of
        # its own: the default does, and it is never taken by anyone else.
        self.port = free_port() if tcp else 5432
        self._as_postgres = os.geteuid() == 0
        try:
            if self._as_postgres:
                # The server refuses to run as root; the directory (0700) must be the postgres user's.
                shutil.chown(self.root, "postgres", "postgres")
            if template is not None:
                self._copy(template)
            else:
                self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "-N")
        except BaseException:
            # No server for the caller to destroy(): the directory is removed here (root may).
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    @property
    def dsn(self) -> str:
        # A socket directory is the DSN's host, percent-encoded (libpq's and asyncpg's form).
        host = "127.0.0.1" if self.tcp else quote(str(self.root), safe="")
        return f"postgresql://postgres@{host}:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr}{done.stdout}\n{log}")

    def _copy(self, template: Path) -> None:
        cmd = ["cp", "-a", str(template), str(self.data)]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"copying the cluster {template} failed ({done.returncode}): {done.stderr}")

    def start(self) -> None:
        # Tests turn fsync off (the cluster is thrown away) but keep synchronous_commit on: a
        # commit must survive a killed server (pg_ctl -m immediate), which crash tests rely on.
        # Benchmarks keep fsync on, like production.
        durability = "" if self.fsync else " -c fsync=off -c full_page_writes=off"
        listen = "127.0.0.1" if self.tcp else "''"
        options = (
            f"-c listen_addresses={listen} -p {self.port} -c unix_socket_directories={self.root}"
            f" -c max_connections=300{durability}"
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


def start_server(
    bindir: Path, attempts: int = 5, *, fsync: bool = False, template: Path | None = None, tcp: bool = True
) -> PgServer:
    """Starts a fresh cluster (a copy of `template` when given, see PgServer). Its port must be
    known before it starts (`-p`): when another process took it between the pick and the
    server's bind, the same cluster starts again on another port, at most `attempts` times.
    A `tcp=False` cluster takes no port (its Unix socket only), so it starts once."""
    server = PgServer(bindir, fsync=fsync, template=template, tcp=tcp)
    try:
        for attempt in range(attempts):
            server.log.unlink(missing_ok=True)  # what the server says below is about this attempt
            try:
                server.start()
                return server
            except RuntimeError as exc:
                if attempt == attempts - 1 or not server.tcp or not port_taken(str(exc)):
                    raise
                server.port = free_port()
    except BaseException:
        server.destroy()
        raise
    raise AssertionError("unreachable")


def port_taken(text: str) -> bool:
    """Whether the server's error says its port was taken ("could not bind IPv4 address
    "127.0.0.1": Address already in use", then "could not create any TCP/IP sockets")."""
    return "address already in use" in text.lower() or "could not bind" in text.lower()
