"""`effectgate serve`: one gateway process (or one worker of `--workers N`) from its config to
its graceful stop: telemetry, the metrics port (runtime/metrics_port.py), the wait for the store
(runtime/waiting.py), the gateway, the ready line, SIGHUP reloads, the stop on SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from effectgate.gateway.config import Config, ConfigError, load_config, unix_path
from effectgate.gateway.observability import IDENTITY, identify, provider_sdk_logs, telemetry_sdk
from effectgate.gateway.runtime.configured import build_adapters, close_adapters, open_configured_store
from effectgate.gateway.runtime.listener import credentials, release
from effectgate.gateway.runtime.metrics_port import ProbeServer
from effectgate.gateway.runtime.process import collector_paused, settle_heap
from effectgate.gateway.runtime.process import run as run_loop
from effectgate.gateway.runtime.startup import (
    METRICS,
    PROBES,
    READY,
    READY_AT,
    WEBHOOKS,
    ServeOptions,
    StartupFailed,
    announce,
    store_failure,
)
from effectgate.gateway.runtime.waiting import WaitingRoom, open_store
from effectgate.gateway.runtime.workers import serve_workers, watch_parent
from effectgate.gateway.store import StoreError

if TYPE_CHECKING:
    from effectgate.gateway.runtime.server import Gateway

log = logging.getLogger("effectgate.server")
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it


async def serve(options: ServeOptions) -> int:
    config = load_config(options.config_path)
    identify(config.telemetry.service_name)
    if options.workers:
        try:
            return await serve_workers(config, options)
        except (ConfigError, OSError) as exc:
            raise StartupFailed(str(exc)) from exc
        except StoreError as exc:
            raise store_failure(config, exc) from exc
    probe_at = telemetry_sdk.prometheus_address(config.telemetry)
    if options.worker_port:  # one of the workers: the parent holds this port for us
        host = config.listen.rpartition(":")[0]
        config = config.model_copy(
            update={"server": config.server.model_copy(update={"listen": f"{host}:{options.worker_port}"})}
        )
        if config.webhooks is not None and options.worker_webhook_port:  # held by the parent too
            hooks = config.webhooks.model_copy(
                update={"listen": f"{config.webhooks.listen.rpartition(':')[0]}:{options.worker_webhook_port}"}
            )
            config = config.model_copy(update={"webhooks": hooks})
        # The parent serves the pool's metrics port; each worker's is on loopback for it.
        probe_at = ("127.0.0.1", 0) if probe_at else None
    provider_sdk_logs(config.telemetry.provider_sdk_logs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_signal(sig: int) -> None:
        received.append(sig)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    # The parent's pid is read now, before the ready line below lets the parent be killed.
    watcher = asyncio.create_task(watch_parent(stop, os.getppid())) if options.worker_port else None
    probes: ProbeServer | None = None
    try:
        resource = {"service.instance.id": IDENTITY.instance_id}
        observability = telemetry_sdk.setup(config.telemetry, config.adapters, resource)
        if probe_at is not None:
            probes = ProbeServer(*probe_at)
            if options.worker_port:
                announce(f"{PROBES} {probes.port}", options.log_format, probes_port=probes.port)
        # The UNKNOWN backlog gauges are read only when there are metrics to show them.
        metrics_on = observability.meter_provider is not None
        gateway = await start(config, options, stop, probes, metrics_on)
    except (ConfigError, OSError) as exc:
        if probes is not None:
            probes.close()
        raise StartupFailed(str(exc)) from exc
    except StoreError as exc:  # the store: refused, unwritable, behind (or unreachable with --fail-fast)
        if probes is not None:
            probes.close()
        raise store_failure(config, exc) from exc
    if gateway is not None:
        settle_heap()  # start-up is done: what is alive now lives as long as the process
        if probes is not None:
            probes.ready = gateway.ready_state
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(gateway.reload(options.config_path)))
        # Tests and supervisors read this line to learn the port (listen = "127.0.0.1:0"); a
        # SIGTERM sent as soon as they read it is a graceful stop (the handlers are in place).
        if unix_path(config.listen):  # no port: the address itself
            announce(f"{READY_AT} {config.listen}", options.log_format, address=config.listen)
        else:
            announce(f"{READY} {gateway.port}", options.log_format, port=gateway.port)
        if gateway.webhooks is not None and not options.worker_port:  # a worker's: its parent's to tell
            announce(f"{WEBHOOKS} {gateway.webhook_port}", options.log_format, port=gateway.webhook_port)
        if probes is not None and not options.worker_port:  # a worker's is its parent's to tell
            announce(f"{METRICS} {probes.port}", options.log_format, metrics_port=probes.port)
        await stop.wait()
        log.info("shutting down gracefully")
        await gateway.stop()
    await observability.shutdown()
    if probes is not None:
        probes.close()
    if watcher is not None:
        await watcher
    if gateway is None:  # stopped before the store ever answered: say so, never a silent exit
        sys.stderr.write("effectgate: stopped while waiting for the store; nothing was served\n")
        return EXIT_INTERRUPTED if signal.SIGINT in received else 0
    return 0


async def start(
    config: Config, options: ServeOptions, stop: asyncio.Event, probes: ProbeServer | None, metrics_on: bool
) -> Gateway | None:
    """The gateway, once its store answers (None when stopped while waiting for it)."""
    shared = bool(options.worker_port)
    with collector_paused():  # the adapters' provider SDKs load here (runtime/process.py)
        adapters = build_adapters(config)  # config errors before anything is opened
    try:
        store = open_configured_store(config)
    except BaseException:
        await close_adapters(adapters)
        raise
    room: WaitingRoom | None = None

    async def hold_the_port() -> None:
        nonlocal room
        room = WaitingRoom(config.listen, credentials(config), shared)
        await room.start()

    def not_ready(why: str) -> None:
        if probes is not None:
            probes.ready = lambda: (False, f"the store cannot be reached: {why}")

    opened = False
    try:
        opened = await open_store(
            store, fail_fast=options.fail_fast, stop=stop, on_wait=hold_the_port, on_problem=not_ready
        )
    except BaseException:
        await close_adapters(adapters)
        raise
    finally:
        if room is not None:
            await room.close()
        if not opened:  # nothing will serve there: a Unix socket's lock goes with the waiting room
            release(config.listen)
    if not opened:
        await close_adapters(adapters)
        return None
    if room is not None and room.port:  # the same port (it was 0: the room's is the one now known)
        host = config.listen.rpartition(":")[0]
        config = config.model_copy(
            update={"server": config.server.model_copy(update={"listen": f"{host}:{room.port}"})}
        )
    # The server (gRPC services, health, reflection) loads once there is a store to serve: a config
    # refused above, or the parent of `--workers`, never loads it.
    with collector_paused():
        from effectgate.gateway.runtime.server import Gateway

    return await Gateway.start(
        config, shared_port=shared, watch_backlog=metrics_on, store=store, adapters=adapters, store_open=True
    )


def run(options: ServeOptions) -> int:
    try:
        return run_loop(serve(options))
    finally:
        sys.stdout.flush()
