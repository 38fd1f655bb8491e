"""What every effectgate RPC goes through before and after its handler, wrapped around each
method handler once, when the services are registered:

- admission: authenticates the caller for the method's roles, then refuses a request that did
  not decode, or with text a store cannot hold (NUL) in any field (INVALID_ARGUMENT, never a
  traceback, and only after auth so that anonymous garbage cannot flood the log);
- errors: a GatewayError (or an IllegalTransition) becomes its gRPC status with google.rpc
  details (rpc/status.py); anything else is INTERNAL with no detail leaked (the traceback goes to
  the log);
- tracing (when a tracer provider is installed): the RPC's SERVER span, continuing the caller's
  trace (calls.rpc_span), with the status code it ended with;
- signals: every call counted and timed by method and status code (`grpc_server_handled_total`,
  `rpc.server.duration`), and every refused caller logged and counted (audit_log.auth_failed).

Why not grpc.aio interceptors (ours, or OpenTelemetry's): an interceptor runs on every call,
for every method, through grpc's interceptor pipeline, before the handler is even found; a
wrapped handler costs one Python call. Handlers behind the wrapper only translate wire <->
domain; they read the caller with `current_principal()`. Health and reflection are registered
unwrapped (found by name: `GenericOnly`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, cast

import grpc
from google.protobuf.message import DecodeError

from effectgate.gateway.config import ROLES, ConfigError, Principal
from effectgate.gateway.core import unstorable
from effectgate.gateway.model import InvalidRequest, PermissionDenied, Unauthenticated
from effectgate.gateway.observability import RpcMetrics, auth_failed, caller, calls, set_caller
from effectgate.gateway.rpc.status import ANSWERED, to_status

log = logging.getLogger("effectgate.rpc")
READERS = frozenset({"agent", "operator", "observer"})
# People who decide or watch: they see payloads (masked) and stories; agents do not.
PEOPLE = frozenset({"operator", "observer"})
# Which roles may call which method; a method missing here is refused.
METHOD_ROLES: dict[str, frozenset[str]] = {
    "/effectgate.v1.EffectGateway/Execute": frozenset({"agent"}),
    "/effectgate.v1.EffectGateway/Verify": frozenset({"agent", "operator"}),
    "/effectgate.v1.EffectGateway/GetAction": READERS,
    "/effectgate.v1.EffectGateway/ListActions": READERS,
    # A wait reads what GetAction does, when it changes (agents block on an approval with it).
    "/effectgate.v1.EffectGateway/WaitAction": READERS,
    # People's reads: the story and the inbox (operator notes, observations, every change).
    "/effectgate.v1.EffectGateway/GetActionHistory": PEOPLE,
    "/effectgate.v1.EffectGateway/WatchActions": PEOPLE,
    # The audit trail: every event of the tenant, with its link in the hash chain.
    "/effectgate.v1.EffectGateway/ListEvents": PEOPLE,
    # The limits' use: what people watch and decide on (agents get their figures in a refusal).
    "/effectgate.v1.EffectGateway/GetLimits": PEOPLE,
    "/effectgate.v1.Operator/Reconcile": frozenset({"operator"}),
    "/effectgate.v1.Operator/Approve": frozenset({"operator"}),
    "/effectgate.v1.Operator/Deny": frozenset({"operator"}),
    "/effectgate.v1.Operator/GrantBypass": frozenset({"operator"}),
    "/effectgate.v1.Operator/GrantLimit": frozenset({"operator"}),
}

Context = grpc.aio.ServicerContext[Any, Any]
Behavior = Callable[[Any, Context], Awaitable[Any]]
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
# The generated `add_<Service>Servicer_to_server(servicer, server)`.
AddServicer = Callable[[Any, Any], None]


class Registry(Protocol):
    """What generated code registers a servicer on (a grpc.aio server; the stubs lack the second)."""

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None: ...

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Handler]) -> None: ...


class Refused:
    """Stands in for a request refused once its caller is authenticated (INVALID_ARGUMENT)."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidRequest) -> None:
        self.error = error


def _tolerant(handler: Handler) -> Callable[[bytes], Any]:
    """The handler's request decoder, answering `Refused` instead of raising for bytes that are
    not the method's message or that hold text a store cannot hold (core's `unstorable`): the
    method refuses it after auth, unary and streaming alike. A NUL in any text is a zero byte on
    the wire, so bytes without one are not walked (most requests: a replay's included)."""
    decode = cast(Callable[[bytes], Any], handler.request_deserializer)

    def tolerant(data: bytes) -> Any:
        try:
            request = decode(data)
        except DecodeError:
            return Refused(InvalidRequest([("request", "is not a valid protobuf message of this method")]))
        if b"\0" in data:  # the same on every store (core/limits/policy.py)
            found = unstorable(request)
            if found:
                return Refused(InvalidRequest(found))
        return request

    return tolerant


class Admission:
    """Wraps each method handler of our services in auth, error translation and its server
    span, once, at registration."""

    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth

    def register(self, server: grpc.aio.Server, add_servicer: AddServicer, servicer: object) -> None:
        """Registers `servicer` on `server` like its generated code does, every handler wrapped,
        every method found by name, none a registered method (`GenericOnly` says why). The
        methods a servicer names in `ANSWERS_SERIALISED` answer bytes already serialised."""
        captured = _Captured()
        add_servicer(servicer, captured)
        serialised: frozenset[str] = getattr(servicer, "ANSWERS_SERIALISED", frozenset())
        wrapped = {
            name: self.wrap(handler, f"/{captured.service}/{name}", serialised=name in serialised)
            for name, handler in captured.handlers.items()
        }
        GenericOnly(server).add_generic_rpc_handlers((grpc.method_handlers_generic_handler(captured.service, wrapped),))

    def wrap(self, handler: Handler, method: str, *, serialised: bool = False) -> Handler:
        if handler.unary_stream is not None:
            return self.wrap_stream(handler, method)
        inner = cast(Behavior, handler.unary_unary)
        tolerant = _tolerant(handler)
        roles = METHOD_ROLES.get(method, frozenset())
        auth = self.auth
        dev = auth.dev_mode  # for as long as the authenticator lives (`Authenticator.replace`)

        async def admitted(request: Any, context: Context) -> Any:
            try:
                if not roles:
                    raise PermissionDenied("no role may call this method", reason="ROLE_REQUIRED")
                set_current_principal(DEV_PRINCIPAL if dev else auth.admit(context, roles))
                if isinstance(request, Refused):
                    raise request.error
                return await inner(request, context)
            except ANSWERED as error:
                if isinstance(error, Unauthenticated | PermissionDenied):
                    refused(error, method, context)
                status = to_status(error)
                calls.rpc_failed(status.code.value[0], status.code.name)
                await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("unexpected error in %s", method)
                calls.rpc_failed(grpc.StatusCode.INTERNAL.value[0], grpc.StatusCode.INTERNAL.name)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the gateway log")

        counted = RpcMetrics(method)
        clock = time.perf_counter
        tracing = calls.TRACING

        async def behavior(request: Any, context: Context) -> Any:
            started = clock()
            try:
                if not tracing.on:
                    answer = await admitted(request, context)
                else:  # the caller's trace goes on here
                    with calls.rpc_span(method, context.invocation_metadata() or ()):
                        answer = await admitted(request, context)
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                counted.done(code.name, code.value[0], clock() - started)
                raise
            except asyncio.CancelledError:  # the caller went away or its deadline passed
                counted.done("CANCELLED", grpc.StatusCode.CANCELLED.value[0], clock() - started)
                raise
            counted.done("OK", 0, clock() - started)
            return answer

        # No serializer: grpc sends the bytes the handler answers as they are.
        serialize = None if serialised else cast(Callable[[Any], bytes], handler.response_serializer)
        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=tolerant, response_serializer=serialize
        )

    def wrap_stream(self, handler: Handler, method: str) -> Handler:
        """A server-streaming method (WatchActions): the same admission and error translation,
        around every message the handler yields (no span: a watch may last for hours)."""
        inner = cast(Callable[[Any, Context], AsyncIterator[Any]], handler.unary_stream)
        tolerant = _tolerant(handler)
        roles = METHOD_ROLES.get(method, frozenset())
        auth = self.auth

        async def behavior(request: Any, context: Context) -> AsyncIterator[Any]:
            try:
                if not roles:
                    raise PermissionDenied("no role may call this method", reason="ROLE_REQUIRED")
                set_current_principal(auth.admit(context, roles))
                if isinstance(request, Refused):
                    raise request.error
                async for message in inner(request, context):
                    yield message
            except ANSWERED as error:
                status = to_status(error)
                await context.abort(status.code, status.details, trailing_metadata=status.trailing_metadata)
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("unexpected error in %s", method)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the gateway log")

        return grpc.unary_stream_rpc_method_handler(
            behavior,
            request_deserializer=tolerant,
            response_serializer=cast(Callable[[Any], bytes], handler.response_serializer),
        )


def refused(error: Unauthenticated | PermissionDenied, method: str, context: Context) -> None:
    """A caller turned away by auth: the cause (never the token) and where it came from."""
    if isinstance(error, Unauthenticated):
        auth_failed(error.cause, method, context.peer())
    elif error.reason in ("ROLE_REQUIRED", "TOOL_NOT_ALLOWED"):
        auth_failed(error.reason.lower(), method, context.peer(), error.principal)


class GenericOnly:
    """A server as a generated `add_<Service>Servicer_to_server` sees it, taking its generic
    handlers only (ours, health, reflection). Why: grpc.aio's serving loop keeps one pending
    request per registered method and waits on all of them (`asyncio.wait`) for every call it
    accepts, so each registered method costs every RPC of every method a few Python calls (with
    all 19 of them registered, about 140 per call, more than a replay's own handler; with
    Execute alone, 2 more per call than with none). A method found by name costs one Python
    call (the generic handler's dictionary lookup), and only its own calls."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = cast(Registry, server)

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Handler]) -> None:
        """Not registered: found by name through the generic handler given alongside."""


class _Captured:
    """Stands in for the server while generated code registers a servicer: keeps its handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: Mapping[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler[Any, Any]]) -> None:
        """The same handlers come again through `add_registered_method_handlers`."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, Handler]) -> None:
        if any(h.unary_unary is None and h.unary_stream is None for h in handlers.values()):
            raise TypeError(f"{service}: only unary and server-streaming methods are wrapped")
        self.service, self.handlers = service, handlers


# -- callers: who they are (tokens to principals) ----------------------------------------------------
#
# Callers: bearer tokens checked against the configured SHA-256 digests, roles and tools.
#
# With no principals configured the gateway is in development mode: every caller is the `dev`
# principal of tenant `dev` with every role (the config refuses to bind anything but loopback then).

DEV_PRINCIPAL = Principal.model_construct(
    name="dev", tenant="dev", token_sha256="", roles=frozenset(ROLES), tools=frozenset()
)

# The authenticated caller of the RPC being handled lives with the audit trail, which names it.
current_principal = caller  # only valid inside a handler behind the admission wrapper
set_current_principal = set_caller


class Authenticator:
    def __init__(self, principals: Sequence[Principal]) -> None:
        self._principals = tuple(principals)

    @property
    def dev_mode(self) -> bool:
        return not self._principals

    def replace(self, principals: Sequence[Principal]) -> None:
        """A new set of principals (SIGHUP). One assignment: a call is checked against the old set
        or the new one, never a mix. Development mode can neither start nor end here."""
        if bool(principals) != bool(self._principals):
            raise ConfigError("[[principals]]: going to or from development mode (no principals) needs a restart")
        self._principals = tuple(principals)

    def admit(self, context: Context, roles: frozenset[str]) -> Principal:
        """The caller of the RPC `context` serves (`authenticate`); its metadata is read only
        when there are principals to check it against."""
        if not self._principals:  # development mode
            return DEV_PRINCIPAL
        return self.authenticate(context.invocation_metadata(), roles)

    def authenticate(self, metadata: Iterable[tuple[str, str | bytes]] | None, roles: frozenset[str]) -> Principal:
        """The principal whose token the metadata carries, if it holds one of `roles`."""
        if not self._principals:  # development mode (`dev_mode`), read without a call per RPC
            return DEV_PRINCIPAL
        token, cause = "", "missing"
        for key, value in metadata or ():
            if key.lower() == "authorization":
                text = value.decode(errors="replace") if isinstance(value, bytes) else value
                scheme, _, token = text.partition(" ")
                if scheme.lower() != "bearer" or not token:
                    token, cause = "", "malformed"
        if not token and cause == "malformed":
            raise Unauthenticated("the 'authorization' metadata is not 'Bearer <token>'", cause)
        if not token:
            raise Unauthenticated("missing 'authorization: Bearer <token>' metadata", cause)
        digest = hashlib.sha256(token.encode()).hexdigest()
        # Compare against every principal so timing does not tell which digest came close.
        found = None
        for principal in self._principals:
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        if found is None:
            raise Unauthenticated("unknown token", "unknown_token")
        if not found.roles & roles:
            wanted = " or ".join(repr(r) for r in sorted(roles))
            raise PermissionDenied(
                f"principal {found.name} needs role {wanted} (its roles: {', '.join(sorted(found.roles))}; "
                "roles are set in the principal's [[principals]] entry)",
                reason="ROLE_REQUIRED",
                principal=found.name,
            )
        return found

    @staticmethod
    def check_tool(principal: Principal, tool: str) -> None:
        if principal.tools and tool not in principal.tools:
            allowed = ", ".join(sorted(principal.tools))
            raise PermissionDenied(
                f"principal {principal.name} may not use tool {tool!r}: its tools are {allowed} "
                f"(add {tool!r} to this principal's tools in the config to allow it)",
                reason="TOOL_NOT_ALLOWED",
                principal=principal.name,
            )
