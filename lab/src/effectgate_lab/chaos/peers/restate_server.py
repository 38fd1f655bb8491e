"""Restate's real server, from its npm package, on loopback ports of its own.

The package (`@restatedev/restate-server`, a registry package that ships the binary) is installed
once into the lab's cache by npm; nothing is downloaded from anywhere else. The server runs with
a throw-away base directory, on free ports, with its memory budgets cut to a shared machine's
size; its retry policies are left at their defaults.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx

from effectgate_lab.labkit.children import free_port

PACKAGE = "@restatedev/restate-server@1.7.12"
CACHE_ENV = "EFFECTGATE_PEERS_CACHE"


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "effectgate-lab" / "peers"
    return Path(os.environ.get(CACHE_ENV, default))


def server_binary() -> Path:
    """The server's binary, installed by npm into the cache on first use (under a lock, so that
    parallel test workers install it once)."""
    root = cache_dir() / "restate-server"
    binary = root / "node_modules" / ".bin" / "restate-server"
    if binary.exists():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to install Restate's server (scripts/install_test_services.sh installs it)")
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), PACKAGE],
                check=True,
                capture_output=True,
                timeout=600,
            )
    return binary


class PortTaken(RuntimeError):
    """A port the server was given was taken before it could bind it."""


class RestateServer:
    """One `restate-server` process: `start()`, `register(uri)`, `stop()`."""

    def __init__(self) -> None:
        self.base_dir = Path(tempfile.mkdtemp(prefix="effectgate-restate-"))
        self.admin_port, self.ingress_port, self.fabric_port = free_port(), free_port(), free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    async def start(self, timeout: float = 90.0, attempts: int = 3) -> None:
        """Starts the server; a port taken between probe and bind (another process on a shared
        machine) is retried on fresh ports."""
        for attempt in range(attempts):
            try:
                await self._start(timeout, self.base_dir / f"data-{attempt}")
                return
            except PortTaken:
                if attempt == attempts - 1:
                    raise
                self.admin_port, self.ingress_port, self.fabric_port = free_port(), free_port(), free_port()

    async def _start(self, timeout: float, data: Path) -> None:
        env = {
            **os.environ,
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.fabric_port}",
            "RESTATE_LISTEN_MODE": "tcp",
            "RESTATE_DISABLE_TELEMETRY": "true",
            # Sized for a shared 2-core machine; durability and retry settings stay the defaults.
            "RESTATE_DEFAULT_NUM_PARTITIONS": "2",
            "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "256MiB",
            "RESTATE_ADMIN__QUERY_ENGINE__MEMORY_SIZE": "64MiB",
            "RESTATE_WORKER__INVOKER__MEMORY_LIMIT": "256MiB",
            "RESTATE_LOG_FILTER": "error",
            # Its invoker makes an `invoker-*` directory in the temporary directory and leaves it
            # at exit: inside base_dir, stop() removes it with the rest.
            "TMPDIR": str(self.base_dir),
        }
        binary = await asyncio.to_thread(server_binary)
        with (self.base_dir / "server.log").open("wb") as log:  # this attempt's
            self.proc = await asyncio.create_subprocess_exec(
                str(binary),
                *("--no-logo", "--base-dir", str(data)),
                stdout=log,
                stderr=log,
                env=env,
            )
        async with httpx.AsyncClient(timeout=2.0) as http:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                if self.proc.returncode is not None:
                    tail = self.log_tail()
                    if "Address in use" in tail:
                        raise PortTaken(tail)
                    raise RuntimeError(f"restate-server exited {self.proc.returncode}: {tail}")
                try:
                    admin = await http.get(f"{self.admin}/health")
                    ingress = await http.get(f"{self.ingress}/restate/health")
                    if admin.status_code == 200 and ingress.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"restate-server not healthy in {timeout:g}s: {self.log_tail()}")
                await asyncio.sleep(0.2)

    def log_tail(self) -> str:
        path = self.base_dir / "server.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    async def register(self, uri: str) -> None:
        """Registers a worker's endpoint (the server discovers its services)."""
        async with httpx.AsyncClient(timeout=30.0) as http:
            reply = await http.post(f"{self.admin}/deployments", json={"uri": uri, "force": True})
            if reply.status_code >= 300:
                raise RuntimeError(f"registering {uri} failed: {reply.status_code} {reply.text}")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        shutil.rmtree(self.base_dir, ignore_errors=True)
