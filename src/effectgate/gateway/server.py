"""Wiring: config -> store, adapters, protocol, services -> a grpc.aio server.

Also the standard health service and server reflection, the reconciler and retention loops, and
a graceful shutdown that lets in-flight actions finish (or leaves them, leased and DISPATCHED,
for the reconciler of the next start).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from effectgate.adapters.base import Adapter
from effectgate.adapters.registry import build_adapter
from effectgate.gateway import retention, telemetry_sdk
from effectgate.gateway.config import Config
from effectgate.gateway.driver import DriverSettings
from effectgate.gateway.operator import Operations
from effectgate.gateway.protocol import EffectProtocol
from effectgate.gateway.reconciler import Reconciler
from effectgate.gateway.rpc.agent_service import EffectGatewayService
from effectgate.gateway.rpc.auth import Authenticator
from effectgate.gateway.rpc.operator_service import OperatorService
from effectgate.gateway.store import Store, open_store
from effectgate.gateway.tools import BoundTool, ToolSet
from effectgate.v1 import gateway_pb2, gateway_pb2_grpc

log = logging.getLogger("effectgate.server")
SERVICE_NAMES = (
    gateway_pb2.DESCRIPTOR.services_by_name["EffectGateway"].full_name,
    gateway_pb2.DESCRIPTOR.services_by_name["Operator"].full_name,
)


def build_adapters(config: Config) -> dict[str, Adapter]:
    used = {tool.adapter for tool in config.tools.values()}
    return {name: build_adapter(name, config.adapters[name]) for name in sorted(used)}


def _credentials(config: Config) -> grpc.ServerCredentials | None:
    if config.tls is None:
        return None
    with open(config.tls.key_file, "rb") as key, open(config.tls.cert_file, "rb") as cert:
        pair = (key.read(), cert.read())
    root = None
    if config.tls.client_ca_file:
        with open(config.tls.client_ca_file, "rb") as ca:
            root = ca.read()
    return grpc.ssl_server_credentials([pair], root_certificates=root, require_client_auth=root is not None)


@dataclass
class Gateway:
    """A running gateway. `await Gateway.start(config)`, then `await gateway.stop()`."""

    config: Config
    store: Store
    adapters: dict[str, Adapter]
    protocol: EffectProtocol
    server: grpc.aio.Server
    health: health_aio.HealthServicer
    reconciler: Reconciler
    port: int
    _background: list[asyncio.Task[None]] = field(default_factory=list)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def start(cls, config: Config) -> Gateway:
        adapters = build_adapters(config)  # config errors surface before anything is opened
        store = open_store(config.store_url)
        try:
            await store.open()
            return await cls._serve(config, store, adapters)
        except BaseException:
            await store.close()
            for adapter in adapters.values():
                with contextlib.suppress(Exception):
                    await adapter.close()
            raise

    @classmethod
    async def _serve(cls, config: Config, store: Store, adapters: dict[str, Adapter]) -> Gateway:
        tools = ToolSet({name: BoundTool(tool, adapters[tool.adapter]) for name, tool in config.tools.items()})
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        protocol = EffectProtocol(
            store,
            tools,
            DriverSettings(
                owner=owner,
                lease_ttl=config.lease_ttl,
                recheck_min=config.recheck_min,
                recheck_max=config.recheck_max,
            ),
        )
        auth = Authenticator(config.principals)
        if auth.dev_mode:
            log.warning(
                "DEVELOPMENT MODE: no [[principals]] configured; every caller is tenant 'dev' with "
                "agent and operator roles. Bound to loopback only. Do not use with real accounts."
            )
        server = grpc.aio.server(
            interceptors=telemetry_sdk.server_interceptors(),
            options=[
                ("grpc.max_receive_message_length", config.max_message_bytes),
                ("grpc.max_send_message_length", config.max_message_bytes * 4),
            ],
        )
        gateway_pb2_grpc.add_EffectGatewayServicer_to_server(EffectGatewayService(protocol, auth), server)
        gateway_pb2_grpc.add_OperatorServicer_to_server(OperatorService(Operations(protocol), auth), server)
        health_servicer = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        credentials = _credentials(config)
        if credentials is None:
            port = server.add_insecure_port(config.listen)
        else:
            port = server.add_secure_port(config.listen, credentials)
        if port == 0:
            raise OSError(f"cannot listen on {config.listen}")
        await server.start()
        reconciler = Reconciler(protocol, interval=config.reconcile_interval)
        gateway = cls(config, store, adapters, protocol, server, health_servicer, reconciler, port)
        gateway._background.append(asyncio.create_task(reconciler.run()))
        gateway._background.append(asyncio.create_task(gateway._retention()))
        for name in ("", *SERVICE_NAMES):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("effectgate listening on port %d (store %s)", port, config.store_url.split("?")[0])
        return gateway

    async def _retention(self) -> None:
        await retention.run_retention(
            self.store,
            {name: tool.retention for name, tool in self.config.tools.items()},
            interval=self.config.retention_interval,
            stop=self._stopping,
        )

    async def stop(self) -> None:
        """Graceful: refuse new calls, let in-flight actions finish within the grace period;
        whatever is still running stays DISPATCHED under a lease for the next reconciler."""
        await self.health.enter_graceful_shutdown()
        self._stopping.set()
        grace = self.config.shutdown_grace
        await self.server.stop(grace)
        inflight = list(self.protocol.inflight.values())
        if inflight:
            await asyncio.wait(inflight, timeout=grace)
        await self.reconciler.stop()
        for task in self._background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.close()
        await self.store.close()
