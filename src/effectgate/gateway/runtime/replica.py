"""One replica of the gateway, built from its config: everything but the doors.

The store clock (and its skew watch), the replica's observer (spans, metrics, audit lines, and
the notices of the [[notify]] deliverer, which subscribes to it), the protocol, the operators'
verbs, the limits desk, the waits, the [[notify]] deliverer and the background jobs (reconciler,
retention, readiness, approval expiry, clock watch, drift audit) — wired exactly as `effectgate
serve` runs them.
`runtime/server.py` puts the gRPC doors in front of it; the deterministic simulator
(`tests/sim/`) builds its replicas with this same function, so the two cannot drift apart.

The sources of time and identity are parameters with the production defaults (the host's wall
and monotonic clocks, a random owner id), so that a simulation can give each replica its own.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from grpc_health.v1 import _async as health_aio

from effectgate.adapters.base import Adapter
from effectgate.gateway.background import (
    ClockWatch,
    Deliverer,
    Notices,
    Readiness,
    Runner,
    compose_background,
    no_problem,
    notifier_of,
)
from effectgate.gateway.config import Config
from effectgate.gateway.core import (
    BoundTool,
    Clock,
    Collaborators,
    DriverSettings,
    EffectProtocol,
    LagBook,
    LagSampler,
    LimitsDesk,
    Operations,
    ReplayCache,
    ToolSet,
    Waits,
)
from effectgate.gateway.runtime.configured import bind_tools, window_problems
from effectgate.gateway.runtime.observing import GatewayObserver
from effectgate.gateway.store import Store, StoreClock


def new_owner() -> str:
    """A lease owner id no other process of any host takes."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Replica:
    owner: str
    protocol: EffectProtocol
    operations: Operations
    desk: LimitsDesk
    waits: Waits
    background: Runner
    readiness: Readiness
    bound: dict[str, BoundTool]
    tools: ToolSet
    # The protocol's clock (the store's, or the one given) and the background jobs'.
    clock: Clock
    background_clock: Clock
    # Watches this host's clock against the store's (None when a clock was given).
    watch: ClockWatch | None
    notifier: Deliverer | None
    # What the core reports to: spans, metrics, audit lines, and the notifier's notices.
    observer: GatewayObserver
    # What is wrong with the tools' windows given the read lags observed (logged at start).
    window_problems: list[str]


async def build_replica(
    config: Config,
    store: Store,
    adapters: Mapping[str, Adapter],
    health_servicer: health_aio.HealthServicer,
    *,
    services: Sequence[str],
    audited: Sequence[str],
    watch_backlog: bool = False,
    clock: Clock | None = None,
    background_clock: Clock | None = None,
    owner: str | None = None,
    wall: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    observer: GatewayObserver | None = None,
) -> Replica:
    """The replica on an open `store`. `clock`: a clock to use instead of the store's (no skew
    watch then); `wall`, `monotonic`: the host's clocks the store clock is anchored with;
    `observer`: what the core reports to (a new `GatewayObserver` unless given)."""
    lags = LagBook(config.consistency)
    bound = bind_tools(config, adapters, lags)
    tools = ToolSet(bound, dict(adapters))
    await lags.load(store, (t.lag_key for t in bound.values()))
    problems = window_problems(bound, lags)
    owner = owner or new_owner()
    watch: ClockWatch | None = None
    if clock is None:
        # One clock for every replica of the store (store/clock.py), anchored before any work.
        store_clock = StoreClock(store, wall=wall, monotonic=monotonic)
        watch = ClockWatch(store_clock, config.clock_skew_bound)
        await watch.check()
        clock = store_clock
    background_clock = background_clock or clock
    observer = observer or GatewayObserver()
    protocol = EffectProtocol(
        Collaborators(
            store,
            tools,
            DriverSettings(
                owner=owner,
                lease_ttl=config.lease_ttl,
                recheck_min=config.recheck_min,
                recheck_max=config.recheck_max,
            ),
            clock=clock,
            sleep=clock.sleep,
            cache=ReplayCache(clock=monotonic),
            clock_problem=watch or no_problem,
            on_answered=LagSampler(store, lags, clock, observer).on_answered,
            observer=observer,
        )
    )
    desk = LimitsDesk(store, tools, clock)
    operations = Operations(protocol)
    notifier = await notifier_of(config, store, protocol, background_clock, owner)
    if notifier is not None:  # denials and breaker openings become notices
        observer.subscribe(Notices(notifier.post, monotonic))
    background, readiness = compose_background(
        config,
        protocol,
        store,
        health_servicer,
        background_clock,
        watch,
        services=services,
        audited=audited,
        watch_backlog=watch_backlog,
        operations=operations,
        tools=bound,
        adapters=adapters,
        desk=desk,
        notifier=notifier,
    )
    return Replica(
        owner,
        protocol,
        operations,
        desk,
        Waits(protocol),
        background,
        readiness,
        bound,
        tools,
        clock,
        background_clock,
        watch,
        notifier,
        observer,
        problems,
    )
