"""`effectgate check`: the config validated as `serve` would start it (every adapter built with
its secrets, the listener's credentials, the notification sinks, the store opened and its clock
probed, each tool's window against the read lags observed, each address serve binds looked at
without binding it; with `--workers N` what `serve --workers N` refuses too), then one summary
and exit.

It loads what a start-up check touches and no more: not the gRPC server and its services, nor
the webhook listener's HTTP stack (`runtime.server` is never imported; tests/test_lazy_imports.py).
"""

from __future__ import annotations

import logging

from effectgate.gateway.background import build_sinks
from effectgate.gateway.config import Config, ConfigError, load_config
from effectgate.gateway.core import LagBook
from effectgate.gateway.observability import mask_url
from effectgate.gateway.runtime.commands.adapter_probes import probe_adapters
from effectgate.gateway.runtime.commands.listen_check import listen_readiness
from effectgate.gateway.runtime.configured import (
    bind_tools,
    build_adapters,
    close_adapters,
    open_configured_store,
    window_problems,
)
from effectgate.gateway.runtime.listener import credentials
from effectgate.gateway.runtime.startup import StartupFailed, refuse_workers
from effectgate.gateway.store import StoreClock, skew_problem


async def validate(config: Config, probe: bool = False) -> tuple[StoreClock, list[str], list[str]]:
    """Load every adapter (secrets resolved), with `probe` make one harmless read per adapter
    (its lines are returned), open the store, measure its clock's offset to this host's (the
    probed clock is returned), compare each tool's window with the read lags observed (the
    problems are returned), close the store."""
    adapters = build_adapters(config)
    try:
        bind_tools(config, adapters)
        credentials(config)
        for sink in build_sinks(config.notify, config.source).values():  # their secrets are read
            await sink.close()
        probed = await probe_adapters(config, adapters) if probe else []
        store = open_configured_store(config)
        await store.open()
        try:
            clock = StoreClock(store)
            await clock.probe()
            lags = LagBook(config.consistency)
            bound = bind_tools(config, adapters, lags)
            await lags.load(store, (t.lag_key for t in bound.values()))
            problems = window_problems(bound, lags)
        finally:
            await store.close()
        return clock, problems, probed
    finally:
        await close_adapters(adapters)


async def run_check(config_path: str, probe: bool = False, workers: int = 0) -> int:
    """The command: the summary on stdout, exit 0; a refused config raises StartupFailed.
    `workers`: as `serve --workers` would start it (0: a single process)."""
    config = load_config(config_path)
    if workers:
        refuse_workers(config, workers)  # serve --workers' own refusal, before anything is opened
    try:
        clock, problems, probed = await validate(config, probe)
        listening = listen_readiness(config)  # nothing bound, no file made
    except (ConfigError, OSError) as exc:
        raise StartupFailed(str(exc)) from exc
    except Exception as exc:
        raise StartupFailed(f"{config.source}: [store] {mask_url(config.store_url)}: {exc}") from exc
    mode = "development mode (no principals)" if config.dev_mode else f"{len(config.principals)} principal(s)"
    tls = "mTLS" if config.tls and config.tls.client_ca_file else "TLS" if config.tls else "no TLS"
    print(
        f"{config_path}: OK: listen {config.listen} ({tls}), store {mask_url(config.store_url)}, {mode}, "
        f"{len(config.adapters)} adapter(s), {len(config.tools)} tool(s)"
    )
    for address in listening:
        print(address.line)
        if address.warning:
            logging.getLogger("effectgate.check").warning("%s", address.warning)
    if workers:
        print(f"workers: {workers}: OK: serve --workers {workers} shares {config.listen} between {workers} processes")
    for line in probed:
        print(line)
    if not probe and config.adapters:
        print("credentials: not checked; `effectgate check --probe` makes one harmless read per adapter")
    for problem in problems:
        print(f"window: WARNING: {problem}")
        logging.getLogger("effectgate.check").warning("%s", problem)
    bound = config.clock_skew_bound
    if not clock.shared:
        print(f"clock: the store has no clock of its own; this host's is used (skew bound {bound:g}s unused)")
        return 0
    verdict = "OUT OF BOUND: a replica here would refuse work" if skew_problem(clock, bound) else "within bound"
    print(
        f"clock: this host's clock is {-clock.offset:+.3f}s off the store's (probe round trip "
        f"{clock.rtt * 1000:.1f} ms; bound {bound:g}s): {verdict}"
    )
    return 0
