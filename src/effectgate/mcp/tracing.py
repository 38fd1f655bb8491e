"""The front door's own spans, exported when the process is configured for OpenTelemetry by the
standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`,
default `effectgate-mcp`) and the gateway's `otel` extra is installed. Each `tools/call` span
continues the host's `traceparent` from `_meta` and is the parent of the gateway's server span, so
host, front door, gateway and provider are one trace."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from opentelemetry import trace

log = logging.getLogger("effectgate.mcp")


def setup(env: Mapping[str, str] = os.environ) -> Callable[[], None]:
    """Installs a tracer provider with an OTLP exporter when configured; returns its shutdown."""
    if not (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return lambda: None
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return lambda: None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed: no front door spans")
        return lambda: None
    service = env.get("OTEL_SERVICE_NAME") or "effectgate-mcp"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider.shutdown
