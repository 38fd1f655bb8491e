"""What every effectgate RPC goes through before and after its handler, as grpc.aio interceptors:

- admission: authenticates the caller for the method's roles, then refuses a request that did
  not decode (INVALID_ARGUMENT, never a traceback, and only after auth so that anonymous garbage
  cannot flood the log);
- errors: a GatewayError becomes its gRPC status with google.rpc details (rpc/status.py);
  anything else is INTERNAL with no detail leaked (the traceback goes to the log).

Both live in one `GatewayInterceptor`.

Handlers behind them only translate wire <-> domain; they read the caller with
`current_principal()`. Health and reflection are not intercepted.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import grpc
from google.protobuf.message import DecodeError

from effectgate.gateway.errors import GatewayError, InvalidRequest, PermissionDenied
from effectgate.gateway.rpc.auth import Authenticator, set_current_principal
from effectgate.gateway.rpc.status import to_status

log = logging.getLogger("effectgate.rpc")
PREFIX = "/effectgate.v1."
READERS = frozenset({"agent", "operator", "observer"})
# Which roles may call which method; a method missing here is refused.
METHOD_ROLES: dict[str, frozenset[str]] = {
    "/effectgate.v1.EffectGateway/Execute": frozenset({"agent"}),
    "/effectgate.v1.EffectGateway/Verify": frozenset({"agent", "operator"}),
    "/effectgate.v1.EffectGateway/GetAction": READERS,
    "/effectgate.v1.EffectGateway/ListActions": READERS,
    "/effectgate.v1.Operator/Reconcile": frozenset({"operator"}),
    "/effectgate.v1.Operator/Approve": frozenset({"operator"}),
    "/effectgate.v1.Operator/GrantBypass": frozenset({"operator"}),
}

Context = grpc.aio.ServicerContext[Any, Any]
Behavior = Callable[[Any, Context], Awaitable[Any]]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
if TYPE_CHECKING:  # generic only in the stubs
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Handler]]


class Undecodable:
    """Stands in for a request whose bytes are not the method's message."""


def _ours(handler: Handler | None, details: grpc.HandlerCallDetails) -> bool:
    return handler is not None and handler.unary_unary is not None and details.method.startswith(PREFIX)


class GatewayInterceptor(_Interceptor):
    """Admission and error translation in one interceptor (each grpc.aio interceptor costs about
    0.1 ms of CPU per call, a replay's whole budget); the wrapped handler of each method is built
    once and reused, so a call pays a dict lookup, not a new handler."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth
        self._wrapped: dict[str, Handler] = {}

    async def intercept_service(self, continuation: Continuation, details: grpc.HandlerCallDetails) -> Handler:
        wrapped = self._wrapped.get(details.method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if not _ours(handler, details):
            return handler
        wrapped = self._wrap(handler, details.method)
        self._wrapped[details.method] = wrapped
        return wrapped

    def _wrap(self, handler: Handler, method: str) -> Handler:
        inner = cast(Behavior, handler.unary_unary)
        decode = cast(Callable[[bytes], Any], handler.request_deserializer)
        roles = METHOD_ROLES.get(method, frozenset())
        auth = self.auth

        def tolerant(data: bytes) -> Any:
            try:
                return decode(data)
            except DecodeError:
                return Undecodable()

        async def behavior(request: Any, context: Context) -> Any:
            try:
                if not roles:
                    raise PermissionDenied("no role may call this method", reason="ROLE_REQUIRED")
                set_current_principal(auth.authenticate(context.invocation_metadata() or (), roles))
                if isinstance(request, Undecodable):
                    raise InvalidRequest([("request", "is not a valid protobuf message of this method")])
                return await inner(request, context)
            except GatewayError as error:
                status = to_status(error)
                await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("unexpected error in %s", method)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the gateway log")

        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=tolerant, response_serializer=handler.response_serializer
        )
