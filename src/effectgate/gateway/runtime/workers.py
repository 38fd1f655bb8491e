"""`effectgate serve --workers N`: several gateway processes on one port, on purpose.

A gateway's port is exclusive (no SO_REUSEPORT), so that a second gateway with another config and
another store can never share the agents' connections by accident. Several processes on one port
are made explicit here: the parent binds the address once (with SO_REUSEPORT, without
SO_REUSEADDR, not listening: it gets no connections and only its workers may bind there, `_hold`)
and claims it under an abstract Unix socket name, then starts N workers
from the same config that listen on that port with SO_REUSEPORT. A plain gateway cannot join
(its bind has no SO_REUSEPORT) and another `--workers` parent cannot either (the claim is taken).
Each worker is a full gateway on the shared store: they cooperate like replicas (leases, fences).

The webhook listener's port ([webhooks] listen) is shared the same way, under its own claim: the
kernel spreads the providers' deliveries over the workers. That is safe because whatever a
delivery changes goes through the shared store: an event id is claimed there once (the provider
log's primary key, `claim_provider_event`), and a write takes the action's lease, so deliveries
of one event landing on two workers at once apply it once (the other is answered `replayed`, or
503 while the action is leased). A refusal names the setting, as a plain serve's does.

The metrics port is the parent's: each worker serves its own on a loopback port it announces, and
the parent answers `/metrics` with every worker's samples (labelled `worker`), `/readyz` with 200
only while every worker is ready, `/livez` while it runs. (prometheus_client's multiprocess mode
does not fit: the gateway's metrics are OpenTelemetry instruments read by the OTel Prometheus
reader, not prometheus_client metric classes, and it would need a shared writable directory.)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import sys
from typing import Any

from effectgate.gateway.config import WEBHOOKS_LISTEN, Config
from effectgate.gateway.observability import telemetry_sdk
from effectgate.gateway.runtime.commands.check import validate
from effectgate.gateway.runtime.listener import cannot_listen, refusal
from effectgate.gateway.runtime.metrics_port import ProbeServer, fetch, merge_metrics
from effectgate.gateway.runtime.startup import (
    METRICS,
    POOL_HOLDS,
    PROBES,
    READY,
    WEBHOOKS,
    ServeOptions,
    announce,
    claim_name,
    refuse_workers,
)
from effectgate.gateway.store import StoreUnavailable

log = logging.getLogger("effectgate.workers")


def _hold(held: socket.socket, address: tuple[str, int]) -> None:
    """Binds `held` with SO_REUSEPORT and, once bound, without SO_REUSEADDR.

    A bound socket with SO_REUSEADDR that does not listen lets any other SO_REUSEADDR socket
    (a plain gateway's gRPC or webhook listener, most servers) bind and listen on the port
    before the workers do; without it, only SO_REUSEPORT sockets of this user (the workers) may.
    The bind itself needs SO_REUSEADDR only when the port has TIME_WAIT connections of a plain
    gateway that stopped (they have no SO_REUSEPORT): then it is set for the bind alone, cleared
    by the next call (a process that bound the port in between can no longer listen on it)."""
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        held.bind(address)
        return
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(address)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)


class PortClaim:
    """The address, held for the workers: a bound SO_REUSEPORT socket and an exclusive claim.
    `setting` names the config key in a refusal (e.g. "[webhooks] listen"), as a plain serve's."""

    def __init__(self, listen: str, setting: str = "") -> None:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._held = socket.socket(family, socket.SOCK_STREAM)
        self._claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _hold(self._held, (host, int(port)))
        except OSError as exc:
            self.close()
            raise refusal(listen, exc, setting) from None
        self.port = int(self._held.getsockname()[1])
        try:
            # Linux abstract namespace: exclusive per host, released when this process dies.
            self._claim.bind(claim_name(self.port))
        except OSError:
            self.close()
            raise OSError(cannot_listen(listen, setting, POOL_HOLDS)) from None

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


def said(line: bytes) -> str:
    """What a worker's stdout line says (its `body` when the line is JSON)."""
    text = line.decode(errors="replace").strip()
    if text.startswith("{"):
        try:
            return str(json.loads(text).get("body", ""))
        except ValueError:
            return ""
    return text


class Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.probes_port = 0


async def _ready(worker: Worker) -> bool:
    """Waits for the worker's ready line (noting its metrics port on the way); False when it
    exited first (its error is on stderr)."""
    assert worker.process.stdout is not None
    while line := await worker.process.stdout.readline():
        text = said(line)
        if text.startswith(PROBES):
            worker.probes_port = int(text.split()[-1])
        elif text.startswith(READY):
            return True
    return False


class PoolProbes:
    """The parent's view of its workers' metrics ports."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    def metrics(self) -> bytes:
        return merge_metrics([fetch(w.probes_port, "/metrics")[1] for w in self.workers if w.probes_port])

    def ready(self) -> tuple[bool, str]:
        if not self.workers:
            return False, "starting"
        notes = []
        for index, worker in enumerate(self.workers):
            status, body = fetch(worker.probes_port, "/readyz") if worker.probes_port else (0, b"starting")
            text = body.decode(errors="replace").strip()
            if status != 200:
                return False, f"worker {index}: {text or 'no answer'}"
            if text.startswith("ok (") and text.endswith(")"):  # ready, with a warning
                notes.append(f"worker {index}: {text[4:-1]}")
        return True, "; ".join(notes)


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


def _relay_hangup(workers: list[asyncio.subprocess.Process]) -> None:
    """SIGHUP to the pool: every worker reloads its principals and certificates."""
    for worker in workers:
        if worker.returncode is None:
            worker.send_signal(signal.SIGHUP)


def _claim_ports(config: Config) -> tuple[PortClaim, PortClaim | None]:
    """The gRPC port's claim and [webhooks]' (claimed first: its refusal comes first, as a plain
    serve's does, server.py)."""
    hooks = PortClaim(config.webhooks.listen, WEBHOOKS_LISTEN) if config.webhooks is not None else None
    try:
        return PortClaim(config.listen), hooks
    except OSError:
        _close(hooks)
        raise


def _close(*claims: PortClaim | None) -> None:
    for claim in claims:
        if claim is not None:
            claim.close()


async def serve_workers(config: Config, options: ServeOptions) -> int:
    """Runs `options.workers` workers on the config's address; returns when stopped by a signal
    (0) or when a worker died (1). A worker that fails to start fails the whole start (2)."""
    count = options.workers
    refuse_workers(config, count)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # from the start: never leave workers behind
        loop.add_signal_handler(sig, stop.set)
    try:
        await validate(config)  # one clear error here rather than the same one from every worker
    except StoreUnavailable:
        if options.fail_fast:
            raise
        # each worker waits for the store itself (NOT_SERVING meanwhile)
    claim, hooks = _claim_ports(config)
    probe_at = telemetry_sdk.prometheus_address(config.telemetry)
    pool = PoolProbes([])
    try:
        probes = ProbeServer(*probe_at, metrics=pool.metrics) if probe_at else None
    except OSError:
        _close(claim, hooks)
        raise
    if probes is not None:
        probes.ready = pool.ready
    argv = ["--log-level", options.log_level, "--log-format", options.log_format, "serve"]
    argv += ["--config", options.config_path, "--worker-port", str(claim.port)]
    argv += ["--worker-webhook-port", str(hooks.port)] if hooks is not None else []
    argv += ["--fail-fast"] if options.fail_fast else []
    workers: list[asyncio.subprocess.Process] = []
    try:
        pool.workers = [Worker(await _start_worker(argv)) for _ in range(count)]
        workers = [w.process for w in pool.workers]
        loop.add_signal_handler(signal.SIGHUP, _relay_hangup, workers)
        starting: asyncio.Future[list[bool]] = asyncio.ensure_future(asyncio.gather(*(_ready(w) for w in pool.workers)))
        halted: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        await asyncio.wait([starting, halted], return_when=asyncio.FIRST_COMPLETED)
        halted.cancel()
        if not starting.done():  # stopped while the workers waited (for their store)
            starting.cancel()
            await _stop(workers, config.shutdown_grace)
            return 0
        if not all(starting.result()):
            await _stop(workers, config.shutdown_grace)
            return 2
        announce(f"{READY} {claim.port} ({count} workers)", options.log_format, port=claim.port, workers=count)
        if hooks is not None:
            announce(f"{WEBHOOKS} {hooks.port}", options.log_format, port=hooks.port)
        if probes is not None:
            announce(f"{METRICS} {probes.port}", options.log_format, metrics_port=probes.port)
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
        _close(claim, hooks)
        if probes is not None:
            probes.close()
