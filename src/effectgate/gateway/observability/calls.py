"""What one Execute leaves behind, all made here: the gateway's observer on the path of a call.

Like an interceptor module around the core's calls, every span, figure and audit line of one
Execute is made in this one module, with the OpenTelemetry API's objects and `metrics`'
instruments called directly (`scripts/execute_walk.py` measures it; tests/test_execute_walk.py
holds it): the RPC's SERVER span and figures (`rpc_span`, `rpc_failed`, `RpcMetrics`, for
rpc/admission.py), the Execute's `effectgate.execute` span, latency and outcome (`ExecuteCall`;
its `traceparent` is a new action's origin), each provider call's `effectgate.provider.execute|verify`
span, timing, counts and refused credentials (`provider_span`), and a settled action's audit
line (`settled`, logger `effectgate.audit`, naming the caller admission set with `set_caller`).
What those spans say of the action (its attributes, its origin link) is `action_spans`', asked
only while a span is recorded. runtime/observing.py binds them as the replica's observer; the
rare points (denials, breakers, expiries, operator acts) and the reconciler's spans
(`telemetry`) are the other modules'. No-ops until `telemetry_sdk.setup` installs an SDK. Spans
carry ids, states and bounded classes, never payloads or provider error text
(`record_exception=False`: only an exception's class).
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode

from effectgate.adapters.base import (
    AmbiguousError,
    CredentialsRefused,
    DefinitiveError,
    NoEffectError,
    Observation,
    RateLimited,
)
from effectgate.gateway.config import Principal
from effectgate.gateway.model import REPORTED, ActionRecord, GatewayError
from effectgate.gateway.observability import metrics
from effectgate.gateway.observability.action_spans import (
    Attr,
    action_attributes,
    describe,
    origin_link,
    traceparent,
    tracer,
)
from effectgate.gateway.observability.metrics import METERING

audit = logging.getLogger("effectgate.audit")


class Tracing:
    """Whether `telemetry_sdk.setup` (the one place that installs a tracer provider) did: until then
    spans are no-ops and a replay makes none. An attribute: the check per call is no call."""

    on = False


TRACING = Tracing()

# The authenticated caller of the RPC being handled (set by admission; unset in background work,
# whose lines name no principal). The variable's own methods, not functions around them: no
# Python frame per RPC. `caller()` raises LookupError outside an RPC.
_caller: contextvars.ContextVar[Principal] = contextvars.ContextVar("effectgate_principal")
set_caller: Callable[[Principal], contextvars.Token[Principal]] = _caller.set
caller: Callable[[], Principal] = _caller.get


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


class RpcMetrics:
    """One method's `rpc.server.duration` and its counts by status code (`grpc.server.handled`
    reads them when collected), label sets made once at registration and per status code seen."""

    def __init__(self, method: str, kind: str = "unary") -> None:
        self.service, _, self.method = method.lstrip("/").partition("/")
        self.kind = kind
        self.counts: dict[str, int] = {}
        self._semconv: dict[str, dict[str, str | int]] = {}
        metrics.RPC_METHODS.append(self)

    def done(self, code_name: str, code: int, seconds: float) -> None:
        labels = self._semconv.get(code_name)
        if labels is None:
            labels = self._semconv[code_name] = {
                "rpc.system": "grpc",
                "rpc.service": self.service,
                "rpc.method": self.method,
                "rpc.grpc.status_code": code,
            }
            self.counts[code_name] = 0
        self.counts[code_name] += 1
        if METERING.on:
            metrics.RPC_DURATION.record(seconds, labels)


# -- Execute ---------------------------------------------------------------------------------


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
                seconds = time.perf_counter() - self.started
                metrics.ACTIONS.add(1, {"tool": self.tool, "outcome": "refused"})
                metrics.EXECUTE_DURATION.record(seconds, {"tool": self.tool, "path": "refused"})
        if self._scope is not None:
            self._scope.__exit__(kind, exc, tb)
        if exc is None and self.record is not None:
            if self.replayed:  # the hottest path: its labels without a look at the state
                path, outcome = ("waited" if self.waited else "replay"), "replayed"
            else:  # a state with an outcome to report (`domain.REPORTED`) by name, else `pending`
                state = self.record.state
                path, outcome = self.path, (str(state.value).lower() if state in REPORTED else "pending")
            seconds = time.perf_counter() - self.started
            metrics.ACTIONS.add(1, {"tool": self.tool, "outcome": outcome})
            metrics.EXECUTE_DURATION.record(seconds, {"tool": self.tool, "path": path})

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


def replayed(record: ActionRecord, tool_call_id: str, started: float) -> None:
    """A replay the core answered from its cache (`started`: its perf_counter) leaves what
    `ExecuteCall` leaves of one: its span when tracing, else the figures with no object made."""
    if TRACING.on:
        with ExecuteCall(record.tool, tool_call_id) as call:
            call.started = started
            call.done(record, True)
    elif METERING.on:
        metrics.ACTIONS.add(1, {"tool": record.tool, "outcome": "replayed"})
        metrics.EXECUTE_DURATION.record(time.perf_counter() - started, {"tool": record.tool, "path": "replay"})


_CALL: contextvars.ContextVar[ExecuteCall | None] = contextvars.ContextVar("effectgate_execute", default=None)


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
        metrics.VERIFICATIONS.add(1, {"tool": self.tool, "outcome": observation.outcome.value})


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
    if not TRACING.on:
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
    """Times and counts one adapter call by class ("ok" or its error's); an answered execute clears
    the adapter's refused credentials, one refused for them (`CredentialsRefused`) marks them."""
    started = time.perf_counter()
    try:
        yield
    except BaseException as exc:
        labels = {"adapter": adapter, "operation": operation, "class": error_class(exc)}
        metrics.PROVIDER_DURATION.record(time.perf_counter() - started, labels)
        metrics.PROVIDER_ERRORS.add(1, labels)
        if operation == "execute" and isinstance(exc, CredentialsRefused):
            metrics.CREDENTIAL_REFUSALS.add(1, {"adapter": adapter})
            metrics.REFUSED_SINCE.setdefault(adapter, time.time())
        if operation == "verify":
            metrics.VERIFICATIONS.add(1, {"tool": record.tool, "outcome": "error"})
        raise
    seconds = time.perf_counter() - started
    metrics.PROVIDER_DURATION.record(seconds, {"adapter": adapter, "operation": operation, "class": "ok"})
    if operation == "execute":
        metrics.REFUSED_SINCE.pop(adapter, None)


# -- the audit line of a settled action --------------------------------------------------------


def scope_digest(scope: str) -> str:
    """What the audit lines say of a scope: it may hold a customer's id, which the logs never
    carry. `printf %s 'customer:cus_42' | sha256sum | cut -c1-16` finds one scope's lines."""
    return hashlib.sha256(scope.encode()).hexdigest()[:16]


def action_fields(record: ActionRecord) -> dict[str, Any]:
    """The action's fields of an audit line (`audit_log.operator_act`'s too). No receipt ids: a
    provider's id may be a payload value (the http adapter's receipt_id)."""
    found = _caller.get(None)
    return {
        "action_id": record.action_id,
        "principal": found.name if found is not None else "",
        "tenant": record.tenant,
        "run_id": record.run_id,
        "step_id": record.step_id,
        "agent": record.agent,
        "tool": record.tool,
        "scope_sha256": scope_digest(record.scope),
        "state": record.state.value,
        "attempts": record.attempts,
        "next_step": record.next_step.value,
    }


def settled(record: ActionRecord) -> ActionRecord:
    """One line when a drive stops with an outcome to report (`domain.REPORTED`); returns the record."""
    if record.state in REPORTED:
        span = trace.get_current_span()
        if span.is_recording():  # the RPC's or the reconciler's span, when tracing
            describe(span, record)
        if not audit.isEnabledFor(logging.INFO):  # the fields are not built for a line not written
            return record
        audit.info(
            "action %s %s",
            record.action_id,
            record.state.value,
            extra={"event": "action_settled", **action_fields(record)},
        )
    return record
