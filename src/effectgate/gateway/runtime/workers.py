"""`effectgate serve --workers N`: several gateway processes on one port, on purpose.

A gateway's port is exclusive (no SO_REUSEPORT), so that a second gateway with another config and
another store can never share the agents' connections by accident. Several processes on one port
are made explicit here: the parent binds the address once (with SO_REUSEPORT, not listening, so
it gets no connections) and claims it under an abstract Unix socket name, then starts N workers
from the same config that listen on that port with SO_REUSEPORT. A plain gateway cannot join
(its bind has no SO_REUSEPORT) and another `--workers` parent cannot either (the claim is taken).
Each worker is a full gateway on the shared store: they cooperate like replicas (leases, fences).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys

from effectgate.gateway.config import Config, ConfigError
from effectgate.gateway.runtime.server import check

log = logging.getLogger("effectgate.workers")
READY = "effectgate serving on port"


class PortClaim:
    """The address, held for the workers: a bound SO_REUSEPORT socket and an exclusive claim."""

    def __init__(self, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._held = socket.socket(family, socket.SOCK_STREAM)
        self._claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self._held.bind((host, int(port)))
        except OSError as exc:
            self.close()
            raise OSError(f"cannot listen on {listen}: {exc.strerror}") from None
        self.port = int(self._held.getsockname()[1])
        try:
            # Linux abstract namespace: exclusive per host, released when this process dies.
            self._claim.bind(f"\0effectgate-port-{self.port}")
        except OSError:
            self.close()
            raise OSError(f"cannot listen on {listen}: another `effectgate serve --workers` holds it") from None

    def close(self) -> None:
        self._held.close()
        self._claim.close()


async def _start_worker(argv: list[str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "effectgate.gateway", *argv, stdout=asyncio.subprocess.PIPE
    )


async def watch_parent(stop: asyncio.Event, parent: int, interval: float = 1.0) -> None:
    """In a worker: stops it when its parent `parent` is gone (even SIGKILLed), so no worker
    outlives it. The caller reads `os.getppid()` before it says it is ready: read here, in a task
    that first runs later, it could already be the reaper's pid on a loaded machine (the parent
    killed right after the ready line), and the worker would never stop."""
    while not stop.is_set():
        if os.getppid() != parent:
            log.warning("the --workers parent is gone; stopping")
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def _ready(worker: asyncio.subprocess.Process) -> bool:
    """Waits for the worker's ready line; False when it exited first (its error is on stderr)."""
    assert worker.stdout is not None
    while line := await worker.stdout.readline():
        if line.decode().startswith(READY):
            return True
    return False


async def _echo(worker: asyncio.subprocess.Process) -> None:
    assert worker.stdout is not None
    while line := await worker.stdout.readline():
        sys.stdout.write(line.decode())
        sys.stdout.flush()


async def _stop(workers: list[asyncio.subprocess.Process], grace: float) -> None:
    for worker in workers:
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.gather(*(w.wait() for w in workers)), grace + 10)
    except TimeoutError:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
        await asyncio.gather(*(w.wait() for w in workers))


async def serve_workers(config: Config, config_path: str, count: int, log_level: str) -> int:
    """Runs `count` workers on the config's address; returns when stopped by a signal (0) or
    when a worker died (1). A worker that fails to start fails the whole start (2)."""
    if count < 1:
        raise ConfigError("--workers: at least 1")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # from the start: never leave workers behind
        loop.add_signal_handler(sig, stop.set)
    await check(config)  # one clear error here rather than the same one from every worker
    claim = PortClaim(config.listen)
    argv = ["--log-level", log_level, "serve", "--config", config_path, "--worker-port", str(claim.port)]
    workers: list[asyncio.subprocess.Process] = []
    try:
        workers = [await _start_worker(argv) for _ in range(count)]
        if not all(await asyncio.gather(*(_ready(w) for w in workers))):
            await _stop(workers, config.shutdown_grace)
            return 2
        print(f"{READY} {claim.port} ({count} workers)", flush=True)
        echoes = [asyncio.create_task(_echo(w)) for w in workers]
        exits = [asyncio.create_task(w.wait()) for w in workers]
        died = asyncio.create_task(asyncio.wait(exits, return_when=asyncio.FIRST_COMPLETED))
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([died, stopping], return_when=asyncio.FIRST_COMPLETED)
        status = 0 if stop.is_set() else 1
        if status:
            log.error("a worker exited; stopping the others")
        await _stop(workers, config.shutdown_grace)
        for task in (*echoes, *exits, died, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return status
    finally:
        if any(w.returncode is None for w in workers):
            await _stop(workers, config.shutdown_grace)
        claim.close()
