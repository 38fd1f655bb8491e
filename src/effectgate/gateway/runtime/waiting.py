"""Start-up while the store is unreachable: wait for it instead of exiting.

A replica started while its database is down (a node reboot, a PostgreSQL failover, a compose
stack starting in any order) keeps retrying the store with a capped exponential backoff. Meanwhile
its port answers as a gateway that is not ready: the gRPC health service says NOT_SERVING, every
other call gets UNAVAILABLE / STORE_UNAVAILABLE with a RetryInfo (nothing was sent: there is no
store to record an intent in), and the metrics port's `/readyz` is 503. Once the store answers,
the waiting server steps aside and the real gateway binds the port. `serve --fail-fast` keeps the
old behaviour: one line, exit 2.

Errors a wait cannot fix (a refused password, a missing database, a schema this role may not
migrate) are `StoreError`s that are not `StoreUnavailable`: they end the start at once either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from effectgate.gateway.model import GatewayUnavailable
from effectgate.gateway.rpc import to_status
from effectgate.gateway.runtime.listener import bind
from effectgate.gateway.store import Store, StoreUnavailable

log = logging.getLogger("effectgate.server")
FIRST_PAUSE, MAX_PAUSE = 0.5, 15.0


class _Unavailable(grpc.GenericRpcHandler):  # type: ignore[type-arg]  # generic in the stubs only
    """Every method but health: UNAVAILABLE, the way a gateway whose store is down answers."""

    def __init__(self, why: Callable[[], str]) -> None:
        self._why = why

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        async def refuse(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            error = GatewayUnavailable(
                f"the gateway is waiting for its store ({self._why()}); nothing was sent: call again later",
                retry_after=2.0,
            )
            status = to_status(error)
            await context.abort(status.code, status.details, status.trailing_metadata)

        return grpc.unary_unary_rpc_method_handler(refuse)


class WaitingRoom:
    """The port, held while the store is awaited (see the module's docstring)."""

    def __init__(self, listen: str, credentials: grpc.ServerCredentials | None, shared_port: bool) -> None:
        self.problem = "starting"
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 1 if shared_port else 0)])
        health = health_aio.HealthServicer()
        self._health = health
        health_pb2_grpc.add_HealthServicer_to_server(health, self._server)
        self._server.add_generic_rpc_handlers((_Unavailable(lambda: self.problem),))
        # The same bind as the gateway's: a taken port is one clear line, never grpc's traceback.
        self.port = bind(self._server, listen, credentials, shared_port)

    async def start(self) -> None:
        await self._health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._server.start()

    async def close(self) -> None:
        await self._server.stop(0)


async def open_store(
    store: Store,
    *,
    fail_fast: bool,
    stop: asyncio.Event,
    on_wait: Callable[[], Any] | None = None,
    on_problem: Callable[[str], None] = lambda why: None,
) -> bool:
    """Opens `store`, retrying while it is unavailable (unless `fail_fast`). `on_wait` is called
    (and awaited) once, at the first failure; `on_problem` gets each failure's text. False when
    `stop` was set while waiting (the store is then closed)."""
    pause = FIRST_PAUSE
    said = ""
    while True:
        try:
            await store.open()
            if said:
                log.info("the store answers: starting")
            return True
        except StoreUnavailable as exc:
            with contextlib.suppress(Exception):
                await store.close()
            if fail_fast:
                raise
            why = " ".join(str(exc).split())
            on_problem(why)
            if not said and on_wait is not None:
                await on_wait()
            if why != said:
                log.warning("the store cannot be reached (%s): waiting, health NOT_SERVING", why)
                said = why
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
        if stop.is_set():
            return False
        pause = min(MAX_PAUSE, pause * 2)
