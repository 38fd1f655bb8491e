"""`tracing=True`: the client joins the agent's OpenTelemetry trace (extra `otel`). Each call gets
a CLIENT span, child of the agent's current span, and sends its `traceparent` to the gateway,
whose server span continues it down to the provider's HTTP span. The interceptors are
opentelemetry-instrumentation-grpc's; `tracing=` a TracerProvider uses that one instead of the
global provider."""

from __future__ import annotations

from typing import Any

Tracing = Any  # bool, or an opentelemetry.sdk.trace.TracerProvider


def _provider(tracing: Tracing) -> Any:
    return None if tracing is True else tracing


def _instrumentation() -> Any:
    try:
        from opentelemetry.instrumentation import grpc as instrumentation
    except ImportError as missing:  # pragma: no cover - depends on the environment
        hint = "tracing=True needs the client's otel extra: pip install 'effectgate-client[otel]'"
        raise ImportError(hint) from missing
    return instrumentation


def aio_interceptors(tracing: Tracing) -> list[Any]:
    """The grpc.aio client interceptors for `tracing` (none when it is off)."""
    if not tracing:
        return []
    return list(_instrumentation().aio_client_interceptors(tracer_provider=_provider(tracing)))


def intercept(channel: Any, tracing: Tracing) -> Any:
    """A blocking channel wrapped with the tracing interceptor (the channel itself when off)."""
    if not tracing:
        return channel
    import grpc

    return grpc.intercept_channel(channel, _instrumentation().client_interceptor(tracer_provider=_provider(tracing)))
