"""Spans of the effect protocol, through the OpenTelemetry API only.

They are no-ops until `telemetry_sdk.setup` installs an SDK (an OTLP endpoint or a Prometheus
listener is configured). The protocol calls these helpers in one line each, so the span layout
lives here:

- `ExecuteCall`: one `effectgate.execute` per Execute, with latency and outcome metrics;
- `ExecuteCall.traceparent`: the W3C context of the Execute that creates an action, stored with it;
- `provider_span`: each provider call (`effectgate.provider.execute|verify`) with the action id
  and attempt, linked to the action's first trace when it runs in another one;
- `reconcile_span`: a root span per reconciler re-check, linked to the action's first trace.

Spans carry ids, states and bounded classes, never payloads or provider error text: exceptions
are not recorded (`record_exception=False`), only their class.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanContext, Status, StatusCode, TraceFlags

from effectgate.adapters.base import (
    AmbiguousError,
    CredentialsRefused,
    DefinitiveError,
    NoEffectError,
    Observation,
    RateLimited,
)
from effectgate.gateway.model import REPORTED, ActionRecord, GatewayError, State
from effectgate.gateway.observability import metrics

tracer = trace.get_tracer("effectgate")
T = TypeVar("T")
Attr = str | int | bool


@contextmanager
def span(name: str, **attributes: Attr) -> Iterator[Span]:
    with tracer.start_as_current_span(
        name,
        attributes={f"effectgate.{k}": v for k, v in attributes.items()},
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def action_attributes(record: ActionRecord) -> dict[str, Attr]:
    return {
        "effectgate.action_id": record.action_id,
        "effectgate.tool": record.tool,
        "effectgate.state": record.state.value,
        "effectgate.attempt": record.attempts,
    }


def describe(current: Span, record: ActionRecord, **extra: Attr) -> None:
    """Attributes of the action as it stands now, and a link to its first trace."""
    if not current.is_recording():
        return
    current.set_attributes(
        {
            **action_attributes(record),
            "effectgate.run_id": record.run_id,
            "effectgate.step_id": record.step_id,
            **{f"effectgate.{k}": v for k, v in extra.items()},
        }
    )
    link = origin_link(record, current)
    linked = {(ln.context.trace_id, ln.context.span_id) for ln in getattr(current, "links", ())}
    if link is not None and (link.context.trace_id, link.context.span_id) not in linked:
        current.add_link(link.context, link.attributes)


# -- the RPC ---------------------------------------------------------------------------------


def rpc_span(method: str, metadata: Iterable[tuple[str, str | bytes]]) -> AbstractContextManager[Span]:
    """The SERVER span of one effectgate RPC, continuing the caller's W3C trace from its gRPC
    metadata, with the gRPC semantic-convention attributes. Made here rather than by the OTel
    grpc.aio interceptor: any server interceptor takes grpc-python off its fast path (about
    0.1 ms of CPU per call, a replay's whole budget)."""
    carrier = {key: value for key, value in metadata if isinstance(value, str)}
    service, _, name = method.lstrip("/").partition("/")
    attributes: dict[str, Attr] = {
        "rpc.system": "grpc",
        "rpc.service": service,
        "rpc.method": name,
        "rpc.grpc.status_code": 0,
    }
    if "user-agent" in carrier:
        attributes["rpc.user_agent"] = carrier["user-agent"]
    return tracer.start_as_current_span(
        method,
        context=propagate.extract(carrier),
        kind=trace.SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def rpc_failed(code: int, name: str) -> None:
    """The RPC being handled ends with gRPC status `code` (its `name`, e.g. NOT_FOUND)."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attribute("rpc.grpc.status_code", code)
        current.set_status(Status(StatusCode.ERROR, name))


# -- the action's origin ---------------------------------------------------------------------


def traceparent(current: Span) -> str:
    """The W3C `traceparent` of `current`; "" when nothing is recorded."""
    context = current.get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def parse_traceparent(value: str) -> SpanContext | None:
    parts = value.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags & 0xFF))
    return context if context.is_valid else None


def origin_link(record: ActionRecord, current: Span | None = None) -> Link | None:
    """A link to the span that created the action, unless `current` is in that same trace."""
    origin = parse_traceparent(getattr(record, "trace_parent", ""))
    if origin is None:
        return None
    if current is not None and current.get_span_context().trace_id == origin.trace_id:
        return None
    return Link(origin, {"effectgate.link": "action_origin", "effectgate.action_id": record.action_id})


# -- Execute ---------------------------------------------------------------------------------


class Tracing:
    """Whether the gateway's telemetry set-up (`telemetry_sdk.setup`, the one place that installs
    a tracer provider) installed one: until then spans are no-ops, and the hottest path (a replay)
    skips creating them at all. An attribute, so that the RPC layer's check per call is no call."""

    on = False


TRACING = Tracing()


def tracing() -> bool:
    return TRACING.on


class ExecuteCall:
    """One Execute in progress, as a context manager: its `effectgate.execute` span (when tracing
    is on) and what the metrics need to know when it ends (outcome, latency by path).
    `with ExecuteCall(tool, tool_call_id) as call:`, `call.done(record, replayed)` at the end."""

    def __init__(self, tool: str, tool_call_id: str) -> None:
        self.tool = tool
        self.waited = False
        self.record: ActionRecord | None = None
        self.replayed = False
        self.span: Span = INVALID_SPAN
        self.traceparent = ""  # the origin a new action records
        self._scope: AbstractContextManager[Span] | None = None
        self._token: contextvars.Token[ExecuteCall | None] | None = None
        if TRACING.on:
            self.span = tracer.start_span(
                "effectgate.execute", attributes={"effectgate.tool": tool, "effectgate.tool_call_id": tool_call_id}
            )
            self._scope = trace.use_span(
                self.span, end_on_exit=True, record_exception=False, set_status_on_exception=False
            )
            self.traceparent = traceparent(self.span)
        self.started = time.perf_counter()

    def __enter__(self) -> ExecuteCall:
        if self._scope is not None:
            self._scope.__enter__()
        self._token = _CALL.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._token is not None:
            _CALL.reset(self._token)
        if exc is not None:
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            if isinstance(exc, GatewayError):
                self.span.set_attribute("effectgate.refused", exc.reason)
                metrics.execute_done("refused", self.tool, "refused", time.perf_counter() - self.started)
        if self._scope is not None:
            self._scope.__exit__(kind, exc, tb)
        if exc is None and self.record is not None:
            if self.replayed:  # the hottest path: its labels without a look at the state
                path, outcome = ("waited" if self.waited else "replay"), "replayed"
            else:
                path, outcome = self.path, outcome_of(self.record.state)
            metrics.execute_done(path, self.tool, outcome, time.perf_counter() - self.started)

    def done(self, record: ActionRecord, replayed: bool) -> None:
        self.record, self.replayed = record, replayed
        if self._scope is None or not self.span.is_recording():  # not tracing: nothing to add
            return
        # The tool is already on the span, the attempt on the provider spans: a replay is the
        # hottest path, so only what is new here.
        self.span.set_attributes(
            {
                "effectgate.action_id": record.action_id,
                "effectgate.state": record.state.value,
                "effectgate.run_id": record.run_id,
                "effectgate.step_id": record.step_id,
                "effectgate.replayed": replayed,
                "effectgate.path": self.path,
            }
        )
        link = origin_link(record, self.span)
        if link is not None:
            self.span.add_link(link.context, link.attributes)

    @property
    def path(self) -> str:
        if self.waited:
            return "waited"
        return "replay" if self.replayed else "new"


_CALL: contextvars.ContextVar[ExecuteCall | None] = contextvars.ContextVar("effectgate_execute", default=None)


def outcome_of(state: State) -> str:
    """Bounded outcome label: a state with an outcome to report (`domain.REPORTED`) by name,
    anything still moving is `pending`."""
    if state in REPORTED:
        return str(state.value).lower()
    return "pending"


def waited_on_holder() -> None:
    """This Execute waits for another worker's drive (single flight)."""
    call = _CALL.get()
    if call is not None:
        call.waited = True


# -- provider calls ----------------------------------------------------------------------------


@dataclass
class ProviderCall:
    span: Span
    tool: str

    def observed(self, observation: Observation) -> None:
        self.span.set_attribute("effectgate.outcome", observation.outcome.value)
        metrics.verified(self.tool, observation.outcome.value)


def error_class(exc: BaseException) -> str:
    """A bounded class for an adapter failure (the message itself is never recorded)."""
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, DefinitiveError):
        return "definitive"
    if isinstance(exc, NoEffectError):
        return "no_effect"
    if isinstance(exc, AmbiguousError):
        return "ambiguous"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, GeneratorExit | KeyboardInterrupt) or type(exc).__name__ == "CancelledError":
        return "cancelled"
    return "error"


@contextmanager
def provider_span(operation: str, record: ActionRecord, adapter: str) -> Iterator[ProviderCall]:
    """`effectgate.provider.<operation>` around one adapter call; the httpx client span (with the
    `traceparent` the provider receives) is its child. With no tracer provider there is no span
    to make (nor a link to parse): only the metrics (with the adapter's refused credentials)."""
    if not tracing():
        with _provider_metrics(operation, record, adapter):
            yield ProviderCall(INVALID_SPAN, record.tool)
        return
    link = origin_link(record, trace.get_current_span())
    with tracer.start_as_current_span(
        f"effectgate.provider.{operation}",
        kind=trace.SpanKind.INTERNAL,
        attributes={**action_attributes(record), "effectgate.adapter": adapter},
        links=[link] if link is not None else None,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            with _provider_metrics(operation, record, adapter):
                yield ProviderCall(current, record.tool)
        except BaseException as exc:
            kind = error_class(exc)
            current.set_attribute("effectgate.error_class", kind)
            current.set_status(Status(StatusCode.ERROR, kind))
            raise


@contextmanager
def _provider_metrics(operation: str, record: ActionRecord, adapter: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        refused_at = time.time() if isinstance(exc, CredentialsRefused) else None
        metrics.provider_call(adapter, operation, error_class(exc), time.perf_counter() - started, refused_at)
        if operation == "verify":
            metrics.verified(record.tool, "error")
        raise
    metrics.provider_call(adapter, operation, "ok", time.perf_counter() - started)


# -- reconciler ------------------------------------------------------------------------------


async def reconcile_span(record: ActionRecord, work: Awaitable[T]) -> T:
    """Runs a reconciler drive under a root span `effectgate.reconcile` linked to the trace that
    created the action (a re-check is its own trace, one hop from the action's story)."""
    link = origin_link(record)
    reason = {State.UNKNOWN: "recheck", State.DISPATCHED: "abandoned"}.get(record.state, "planned")
    with tracer.start_as_current_span(
        "effectgate.reconcile",
        context=otel_context.Context(),
        attributes={**action_attributes(record), "effectgate.reason": reason},
        links=[link] if link is not None else None,
        record_exception=False,
    ):
        return await work


def annotate_current(record: ActionRecord) -> None:
    """Puts the action's ids and state on the current span (an RPC's or the reconciler's)."""
    describe(trace.get_current_span(), record)
