"""The core under both clients, after httpx's BaseClient: settings, call metadata, the channel's
arguments, starting a call on its stub, retry decisions and the mapping of gRPC errors to typed
ones live here once. EffectGateClient (asyncio) and SyncEffectGateClient (blocking) only do the
I/O: they open their kind of channel, await or block on a call, and sleep between attempts."""

from __future__ import annotations

import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, Unpack, cast

import grpc

from effectgate.client.calls import Call
from effectgate.client.errors import from_rpc_error
from effectgate.client.retry import RetryPolicy, as_policy
from effectgate.client.settings import CHANNEL_OPTIONS, Connection, Settings
from effectgate.v1 import gateway_pb2_grpc

C = TypeVar("C")
GatewayT = TypeVar("GatewayT")  # the generated stubs: blocking or asyncio
OperatorT = TypeVar("OperatorT")
F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("effectgate.client")


class Attempts:
    """The retry decisions of one call: after each failure, how long to wait before the next
    attempt, or the typed error to raise. `policy` None: never retry."""

    def __init__(self, policy: RetryPolicy | None, clock: Callable[[], float]) -> None:
        self.policy, self.clock = policy, clock
        self.started, self.attempt = clock(), 0

    def failed(self, raw: grpc.RpcError) -> float:
        self.attempt += 1
        error = from_rpc_error(raw)
        wait = self.policy.delay(error, self.attempt, self.clock() - self.started) if self.policy else None
        if wait is None:
            raise error from None
        log.info("retrying in %.2fs (attempt %d): %s", wait, self.attempt + 1, error)
        return wait


class Options(Connection, total=False):
    """The keyword arguments of both clients; ClientCore.__init__ and Settings.resolve have their
    defaults."""

    retry: RetryPolicy | bool | None
    timeout: float | None
    headers: Mapping[str, str] | None
    tracing: Any


class ClientCore(ABC, Generic[GatewayT, OperatorT]):
    """What both clients share. `target`, `token` and TLS default to EFFECTGATE_TARGET,
    EFFECTGATE_TOKEN and EFFECTGATE_TLS_CA / _CERT / _KEY; `retry=True` (or a RetryPolicy) retries
    the safe cases; `timeout` is the default deadline of each call, in seconds; `tracing=True`
    puts each call in the caller's OpenTelemetry trace (extra `otel`)."""

    def __init__(
        self,
        target: str | None = None,
        *,
        retry: RetryPolicy | bool | None = None,
        timeout: float | None = 30.0,
        headers: Mapping[str, str] | None = None,
        tracing: Any = False,
        **connection: Unpack[Connection],
    ) -> None:
        self.settings = Settings.resolve(target, **connection)
        self.retry = as_policy(retry)
        self.timeout = timeout
        # Extra call metadata sent with every call (e.g. a W3C traceparent from a front door).
        self._headers = tuple((headers or {}).items())
        # True (or a TracerProvider): join the agent's OpenTelemetry trace (tracing.py; extra `otel`).
        self.tracing = tracing
        self._stubs: tuple[GatewayT, OperatorT] | None = None

    @property
    def metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return (*self.settings.call_metadata, *self._headers)

    @property
    def stub(self) -> GatewayT:
        """The generated stub (raw gRPC errors); pass `metadata=client.metadata`."""
        return self._ensure()[0]

    @property
    def operator(self) -> OperatorT:
        """The generated Operator stub (raw gRPC errors); pass `metadata=client.metadata`."""
        return self._ensure()[1]

    @abstractmethod
    def _ensure(self) -> tuple[GatewayT, OperatorT]:
        """The stubs, on a channel opened when needed."""

    def _on(self, channel: grpc.Channel | grpc.aio.Channel) -> tuple[GatewayT, OperatorT]:
        stubs = (gateway_pb2_grpc.EffectGatewayStub(channel), gateway_pb2_grpc.OperatorStub(channel))
        return cast(tuple[GatewayT, OperatorT], stubs)

    def _dial(self, secure: Callable[..., C], insecure: Callable[..., C], **extra: Any) -> C:
        """A new channel (grpc's or grpc.aio's factories): TLS when the settings ask for it."""
        credentials = self.settings.credentials()
        if credentials is not None:
            return secure(self.settings.target, credentials, options=CHANNEL_OPTIONS, **extra)
        return insecure(self.settings.target, options=CHANNEL_OPTIONS, **extra)

    def _start(self, call: Call[Any]) -> Any:
        """Starts `call` on its stub: the response (blocking stubs) or an awaitable of it (asyncio)."""
        rpc = getattr(self.operator if call.operator else self.stub, call.method)
        timeout = call.timeout if call.timeout is not None else self.timeout
        return rpc(call.request, timeout=timeout, metadata=self.metadata)

    def _attempts(self, call: Call[Any], clock: Callable[[], float]) -> Attempts:
        return Attempts(None if call.operator else self.retry, clock)


def signed_as(method: F, build: Callable[..., object], name: str = "") -> F:
    """`method`, a client method that sends what `build` describes, with `build`'s docstring and
    parameters (after `self`), for help() and editors."""
    signature = inspect.signature(build)
    own = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[own, *signature.parameters.values()], return_annotation=inspect.Signature.empty
    )
    method.__name__ = method.__qualname__ = name or build.__name__
    method.__doc__ = build.__doc__
    return method
