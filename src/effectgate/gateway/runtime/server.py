"""Wiring: config -> store, adapters, protocol, services -> a grpc.aio server.

Also the standard health service (following readiness: store writable, reconciler alive) and
server reflection, the background work on one runner (reconciler, retention, readiness, the
UNKNOWN backlog when metrics are on), and a graceful shutdown that lets in-flight actions finish
(or leaves them, leased and DISPATCHED, for the reconciler of the next start). The listener
(TLS credentials, an exclusive bind) is `listener`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from effectgate.adapters.base import Adapter
from effectgate.gateway.background import (
    Deliverer,
    ForgeryWatch,
    Readiness,
    Runner,
    Sink,
    build_sinks,
)
from effectgate.gateway.config import WEBHOOKS_LISTEN, Config, ConfigError, load_config
from effectgate.gateway.core import (
    Clock,
    EffectProtocol,
    ProviderReports,
    Waits,
)
from effectgate.gateway.observability import metrics
from effectgate.gateway.rpc import Admission, Authenticator, EffectGatewayService, GenericOnly, Limits, OperatorService
from effectgate.gateway.runtime.configured import (
    build_adapters,
    close_adapters,
    open_configured_store,
    tenants_of,
)
from effectgate.gateway.runtime.listener import Certificates, listen, probe_bind, refusal, release
from effectgate.gateway.runtime.observing import GatewayObserver
from effectgate.gateway.runtime.replica import build_replica
from effectgate.gateway.runtime.shutdown import ShutdownDeadline
from effectgate.gateway.store import Store
from effectgate.v1 import gateway_pb2, gateway_pb2_grpc

if TYPE_CHECKING:
    from effectgate.gateway.intake import WebhookIntake

log = logging.getLogger("effectgate.server")
SERVICE_NAMES = (
    gateway_pb2.DESCRIPTOR.services_by_name["EffectGateway"].full_name,
    gateway_pb2.DESCRIPTOR.services_by_name["Operator"].full_name,
)


@dataclass
class Gateway:
    """A running gateway. `await Gateway.start(config)`, then `await gateway.stop()`."""

    config: Config
    store: Store
    adapters: dict[str, Adapter]
    protocol: EffectProtocol
    server: grpc.aio.Server
    health: health_aio.HealthServicer
    background: Runner
    port: int
    readiness: Readiness | None = None
    auth: Authenticator | None = None
    certificates: Certificates | None = None

    def ready_state(self) -> tuple[bool, str]:
        """(ready, why not) for the metrics port's /readyz: the health service's last verdict."""
        if self.readiness is None or not self.readiness.serving:
            return False, (self.readiness.problem if self.readiness else "") or "starting"
        # Refused credentials keep the replica ready (every replica shares the key: taking them
        # all out would turn one adapter's outage into the whole gateway's) but say so.
        refused = sorted(metrics.refused_credentials())
        return True, f"credentials refused by [adapters.{'], ['.join(refused)}]" if refused else ""

    async def reload(self, config_path: str) -> bool:
        """SIGHUP: principals (and TLS certificates) from the config file again. Calls in flight
        finish under the set they were admitted with; the next call sees the new one. A file
        that does not load keeps the running set, with one line saying why."""
        try:
            config = load_config(config_path)
            if self.auth is None:
                raise ConfigError("this gateway has no principals to reload")
            if self.certificates is not None and config.tls is not None:
                self.certificates.replace(config)
            elif (self.certificates is None) != (config.tls is None):
                raise ConfigError(f"{config.source}: [server.tls] is added or removed: that needs a restart")
            sinks = self._notify_sinks(config)
            self.auth.replace(config.principals)
            if self.notifier is not None and sinks is not None:
                self.notifier.replace_sinks(sinks)
        except ConfigError as exc:
            log.error("reload refused, the running principals and certificates stay: %s", exc)
            return False
        sinks_word = f", {len(config.notify)} notification sink(s)" if self.notifier is not None else ""
        log.info(
            "reloaded: %d principal(s)%s%s",
            len(config.principals),
            ", TLS certificates" if config.tls else "",
            sinks_word,
        )
        return True

    def _notify_sinks(self, config: Config) -> dict[str, Sink] | None:
        """The [[notify]] sinks of a reloaded config (None: unchanged); adding the first or
        removing the last needs a restart (the deliverer job is made at start-up)."""
        if self.notifier is None:
            if config.notify:
                raise ConfigError(f"{config.source}: [[notify]] is added: that needs a restart")
            return None
        if not config.notify:
            raise ConfigError(f"{config.source}: every [[notify]] is removed: that needs a restart")
        if tuple(s.config for s in self.notifier.sinks.values()) == config.notify:
            return None
        return build_sinks(config.notify, config.source)

    # The webhook listener ([webhooks]) and its port; None and 0 when not configured.
    webhooks: WebhookIntake | None = None
    webhook_port: int = 0
    waits: Waits | None = None
    notifier: Deliverer | None = None

    @classmethod
    async def start(
        cls,
        config: Config,
        *,
        shared_port: bool = False,
        watch_backlog: bool = False,
        store: Store | None = None,
        adapters: Mapping[str, Adapter] | None = None,
        clock: Clock | None = None,
        background_clock: Clock | None = None,
        store_open: bool = False,
        observer: GatewayObserver | None = None,
    ) -> Gateway:
        """`store_open`: `store` is open already (runtime/waiting.py waited for it).
        `shared_port`: one of the workers of `effectgate serve --workers N` (runtime/workers.py);
        `watch_backlog`: read the UNKNOWN backlog for the metrics' gauges. `store`, `adapters`,
        `clock`: parts to serve instead of the config's and the store's clock (the in-process
        gateway of `effectgate.testing`; no clock-skew watch then); the gateway opens and closes
        them as its own. `background_clock`:
        the background jobs' clock when it must differ from `clock` (a virtual clock whose sleeps
        advance time would let the jobs' idle waits race it ahead). `observer`: what the core
        reports to, when not a new `GatewayObserver` (a test's recorder)."""
        # Config errors surface before anything is opened.
        adapters = dict(adapters) if adapters is not None else build_adapters(config)
        try:
            store = store if store is not None else open_configured_store(config)
        except BaseException:
            await close_adapters(adapters)
            raise
        try:
            if not store_open:
                await store.open()
            return await cls._serve(
                config, store, adapters, shared_port, watch_backlog, clock, background_clock, observer
            )
        except BaseException:
            await store.close()
            await close_adapters(adapters)
            raise

    @classmethod
    async def _serve(
        cls,
        config: Config,
        store: Store,
        adapters: dict[str, Adapter],
        shared_port: bool,
        watch_backlog: bool,
        clock: Clock | None,
        background_clock: Clock | None,
        observer: GatewayObserver | None,
    ) -> Gateway:
        health_servicer = health_aio.HealthServicer()
        replica = await build_replica(
            config,
            store,
            adapters,
            health_servicer,
            services=("", *SERVICE_NAMES),
            audited=tenants_of(config),
            watch_backlog=watch_backlog,
            clock=clock,
            background_clock=background_clock,
            observer=observer,
        )
        for problem in replica.window_problems:
            log.warning("%s", problem)
        protocol, clock, notifier = replica.protocol, replica.clock, replica.notifier
        background_clock, background, readiness = replica.background_clock, replica.background, replica.readiness
        auth = Authenticator(config.principals)
        if auth.dev_mode:
            log.warning(
                "DEVELOPMENT MODE: no [[principals]] configured; every caller is tenant 'dev' with "
                "every role. Bound to loopback (or a Unix socket) only. Do not use with real accounts."
            )
        if config.plaintext_exposed:
            log.warning(
                "PLAINTEXT: [[principals]] on non-loopback %s without TLS (server.allow_plaintext = true): "
                "bearer tokens cross the network in the clear unless a proxy terminates TLS in front",
                config.listen,
            )
        max_send = config.max_message_bytes * 4
        limits = Limits.for_server(config.gateway.max_id_bytes, config.gateway.max_note_bytes, max_send)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", max_send),
                # Exclusive port: a second gateway must fail, not share connections (split brain).
                # Only the workers of one `serve --workers N` share theirs, which their parent holds.
                ("grpc.so_reuseport", 1 if shared_port else 0),
            ],
        )
        admission = Admission(auth)
        desk, waits = replica.desk, replica.waits
        admission.register(
            server,
            gateway_pb2_grpc.add_EffectGatewayServicer_to_server,
            EffectGatewayService(protocol, limits, clock, desk, waits),
        )
        admission.register(
            server, gateway_pb2_grpc.add_OperatorServicer_to_server, OperatorService(replica.operations, limits, desk)
        )
        # Found by name, not registered: a registered method costs every call (GenericOnly).
        unregistered = cast(grpc.aio.Server, GenericOnly(server))
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, unregistered)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), unregistered
        )
        certificates = Certificates(config) if config.tls is not None else None
        # Its line (check's too) before the gRPC address is taken; a worker's is its parent's,
        # probed there (runtime/workers.py), where the other workers listen now.
        if config.webhooks is not None and not shared_port:
            probe_bind(config.webhooks.listen, WEBHOOKS_LISTEN)
        port = listen(server, config, shared_port, certificates)
        intake = None
        if config.webhooks is not None:
            # The listener's HTTP stack (uvicorn, h11) loads only for a gateway that has [webhooks].
            from effectgate.gateway.intake import WebhookIntake, adapter_tenants

            reports = ProviderReports(protocol, store, replica.tools, adapter_tenants(config))
            intake = WebhookIntake(reports, adapters, config.webhooks)
            if notifier is not None:
                intake.on_refused = ForgeryWatch(notifier, background_clock).refused
        background.start()
        try:
            await start_grpc(server)
            webhook_port = await _start_webhooks(intake, config, shared_port)
            await readiness.check()
        except BaseException:
            await background.stop()
            await server.stop(0)
            if intake is not None:
                await intake.stop()
            raise
        log.info("effectgate listening on port %d (store %s)", port, store.describe())
        return cls(
            config,
            store,
            adapters,
            protocol,
            server,
            health_servicer,
            background,
            port,
            readiness,
            auth,
            certificates,
            intake,
            webhook_port,
            waits,
            notifier,
        )

    async def stop(self) -> None:
        """Graceful: refuse new calls, let in-flight actions finish within the grace period;
        whatever is still running stays DISPATCHED under a lease for the next reconciler."""
        deadline = ShutdownDeadline(self.config.shutdown_grace)  # one deadline for every phase (shutdown.py)
        await self.health.enter_graceful_shutdown()
        webhooks = self.webhooks
        if webhooks is not None:
            await deadline.run("webhooks", lambda _: webhooks.stop())
        if self.waits is not None:  # waiting calls answer now instead of holding the grace period
            self.waits.release()
        await deadline.run("calls", self.server.stop, honours=True)
        release(self.config.listen)  # a Unix socket's lock: another gateway may serve there now
        await deadline.run("drives", self.protocol.drain, honours=True)
        await deadline.run("background", lambda _: self.background.stop(), closing=True)
        await deadline.run("adapters", lambda _: close_adapters(self.adapters), closing=True)
        await deadline.run("store", lambda _: self.store.close(), closing=True)
        deadline.report()


async def start_grpc(server: grpc.aio.Server) -> None:
    """`server.start()`, finished even when the caller is cancelled (Ctrl-C while a gateway starts).

    Cancelled half-way, grpc.aio's start leaves its serving loop to set a result on the future the
    start was waiting on, now cancelled: `InvalidStateError`, raised again from `server.stop()`
    and logged as a task exception nobody retrieved. Shielded, the start ends first (it binds and
    starts the loop, it waits on nothing), then the cancellation goes on and the caller stops the
    server as after any failed start.
    """
    starting = asyncio.ensure_future(server.start())
    try:
        await asyncio.shield(starting)
    except asyncio.CancelledError:
        await starting
        raise


async def _start_webhooks(intake: WebhookIntake | None, config: Config, shared: bool) -> int:
    """The webhook listener's port (0: none); its bind's failure names [webhooks] listen.
    `shared`: a worker's, on the port its parent holds for the pool (SO_REUSEPORT)."""
    if intake is None or config.webhooks is None:
        return 0
    try:
        return await intake.start(shared=shared)
    except OSError as exc:  # taken since the probe above
        raise refusal(config.webhooks.listen, exc, WEBHOOKS_LISTEN) from None
