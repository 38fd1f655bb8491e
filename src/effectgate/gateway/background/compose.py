"""The gateway's background work composed from its config: the reconciler, retention,
readiness, approval expiry, the clock watch, the metric watchers, the drift audit and the
[[notify]] deliverer, on one runner (`runtime/server.py` starts it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grpc_health.v1 import _async as health_aio

from effectgate.adapters.base import Adapter
from effectgate.gateway.background.clock_watch import ClockWatch
from effectgate.gateway.background.drift import drift_job
from effectgate.gateway.background.expiry import expiry_job
from effectgate.gateway.background.notify import Deliverer, build_sinks
from effectgate.gateway.background.readiness import Readiness
from effectgate.gateway.background.reconciler import Reconciler
from effectgate.gateway.background.retention import retention_job
from effectgate.gateway.background.runner import Job, Runner
from effectgate.gateway.background.watchers import backlog_job, limits_job
from effectgate.gateway.config import Config, ConfigError
from effectgate.gateway.core import BoundTool, Clock, EffectProtocol, LimitsDesk, Operations
from effectgate.gateway.store import Store


def no_problem() -> str:
    """The clock's problem when nothing watches it: none."""
    return ""


def compose_background(
    config: Config,
    protocol: EffectProtocol,
    store: Store,
    health_servicer: health_aio.HealthServicer,
    clock: Clock,
    watch: ClockWatch | None,
    *,
    services: Sequence[str],
    audited: Sequence[str],
    watch_backlog: bool,
    operations: Operations | None = None,
    tools: Mapping[str, BoundTool] | None = None,
    desk: LimitsDesk | None = None,
    adapters: Mapping[str, Adapter] | None = None,
    notifier: Deliverer | None = None,
) -> tuple[Runner, Readiness]:
    """The gateway's background jobs on one runner, and the readiness they report through
    (`services`: the health service names it sets; `audited`: the drift audit's tenants)."""
    reconciler = Reconciler(protocol, interval=config.reconcile_interval)
    readiness = Readiness(
        store,
        health_servicer,
        services,
        interval=config.gateway.health_interval,
        alive=lambda: runner.alive("reconciler"),
        clock=clock,
        clock_problem=watch or no_problem,
    )
    retentions = {name: tool.retention for name, tool in config.tools.items()}
    try:
        retention = retention_job(store, retentions, config.retention_interval, clock)
    except ValueError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    jobs: list[Job] = [reconciler.job(), retention, readiness.job()]
    ttls = {name: tool.approval_ttl for name, tool in config.tools.items()}
    expiry = expiry_job(operations or Operations(protocol), ttls, config.reconcile_interval)
    if expiry is not None:  # waiting actions whose approval_ttl passed become REJECTED
        jobs.append(expiry)
    if watch is not None:  # re-anchors the store clock; a skewed replica takes no work

        async def clock_changed() -> None:  # health follows at once; the reconciler resumes at once
            await readiness.check()
            protocol.wake_reconciler()

        watch.on_change = clock_changed
        jobs.append(Job("clock", watch.check, config.clock_probe_interval, at_start=False))
    if watch_backlog:  # the UNKNOWN backlog gauges (metrics only)
        tenants = sorted({p.tenant for p in config.principals} or {"dev"})
        jobs.append(backlog_job(store, tenants, config.telemetry.backlog_interval))
        limits = limits_job(desk, tenants, config.telemetry.backlog_interval) if desk is not None else None
        if limits is not None:  # the limits' use and what is left, per tenant and tool
            jobs.append(limits)
    if config.audit.interval > 0 and tools is not None and adapters is not None:  # the drift audit
        jobs.append(
            drift_job(
                store,
                tools,
                adapters,
                audited,
                interval=config.audit.interval,
                lookback=config.audit.since,
                clock=clock,
            )
        )
    if notifier is not None:  # [[notify]]: notifications from the store, at least once
        jobs.append(notifier.job())
    runner = Runner(clock, jobs)
    return runner, readiness


async def notifier_of(
    config: Config, store: Store, protocol: EffectProtocol, clock: Clock, owner: str
) -> Deliverer | None:
    """The deliverer of the [[notify]] sinks (None: none configured). Limit denials and breaker
    openings reach it through the replica's observer (`Notices`, runtime/replica.py)."""
    if not config.notify:
        return None
    try:
        # Before serving: an action written before the first pass is news, not history.
        await store.notify_start()
    except NotImplementedError:
        raise ConfigError(
            f"{config.source}: [[notify]] needs a store that keeps an outbox (SQLite, PostgreSQL)"
        ) from None
    sinks = build_sinks(config.notify, config.source)
    notifier = Deliverer(store, protocol, sinks, clock, owner=owner, interval=config.gateway.notify_interval)
    return notifier
