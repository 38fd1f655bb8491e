"""Installs the OpenTelemetry SDK for `effectgate serve`: exporters, instrumentations, Prometheus.

Configured by the standard environment (`OTEL_SDK_DISABLED`, `OTEL_EXPORTER_OTLP_*`,
`OTEL_TRACES_EXPORTER`, `OTEL_METRICS_EXPORTER`, `OTEL_LOGS_EXPORTER`, `OTEL_TRACES_SAMPLER[_ARG]`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`,
`OTEL_PROPAGATORS`), then the `[telemetry]` section. With neither an OTLP endpoint nor a
Prometheus listener nothing is installed and every span and metric stays an API no-op; log
records go over OTLP only when asked for (log_export.py). The SDK packages come with the `otel`
extra; without them a configured exporter is a start-up error.

Instrumented: the gRPC server (its SERVER span made by rpc/admission.py; health and reflection
untraced), httpx (the postmark and http adapters) and aiohttp (the Stripe SDK): each provider call
gets a client span and carries W3C `traceparent`; asyncpg. Captured HTTP headers always pass a
redaction list that covers credentials, whatever
`OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS` says, and URLs are recorded without
query values (the http adapter's as its template).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from effectgate.gateway.config import TelemetryConfig
from effectgate.gateway.observability import calls, metrics
from effectgate.gateway.observability.log_export import logs_endpoint, start_log_export

log = logging.getLogger("effectgate.telemetry")
SANITIZE_ENV = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS"
# Header names matched (case-insensitive `search`) are exported as [REDACTED].
ALWAYS_REDACTED = (
    "auth",
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "cookie",
    "session",
    "signature",
    "credential",
    "api-",
)
URL_TEMPLATE = "effectgate.url_template"  # httpx request extension set by the http adapter


def _env_list(env: Mapping[str, str], name: str, default: str) -> set[str]:
    return {part.strip().lower() for part in env.get(name, default).split(",") if part.strip()}


def _is_true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


@dataclass
class Telemetry:
    """What `setup` installed; `watch` starts the backlog reader, `shutdown` flushes."""

    config: TelemetryConfig
    tracer_provider: Any = None
    meter_provider: Any = None
    # The gateway's log records over OTLP (log_export.py), when asked for.
    logs: Any = None
    # The Prometheus reader (its registry is served on the metrics port by runtime/metrics_port.py).
    prometheus: Any = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stopped: bool = False

    @property
    def enabled(self) -> bool:
        return any(part is not None for part in (self.tracer_provider, self.meter_provider, self.logs))

    async def shutdown(self) -> None:
        self._stopped = True
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        loop = asyncio.get_running_loop()
        # Flushing exports over the network: not on the event loop.
        if self.tracer_provider is not None:
            await loop.run_in_executor(None, self.tracer_provider.shutdown)
        if self.meter_provider is not None:
            await loop.run_in_executor(None, self.meter_provider.shutdown)
        # Last, so the records logged while the others stop are sent too.
        if self.logs is not None:
            await loop.run_in_executor(None, self.logs.shutdown)


def prometheus_address(config: TelemetryConfig, env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """Where the metrics port listens: `[telemetry] prometheus_listen`, else the standard
    OTEL_METRICS_EXPORTER=prometheus with OTEL_EXPORTER_PROMETHEUS_HOST/PORT; None = no port."""
    env = os.environ if env is None else env
    if config.prometheus_address is not None:
        return config.prometheus_address
    if "prometheus" in _env_list(env, "OTEL_METRICS_EXPORTER", "otlp"):
        return env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost"), int(
            env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464")
        )
    return None


def setup(
    config: TelemetryConfig,
    adapters: Mapping[str, Mapping[str, Any]] | None = None,
    resource_attributes: Mapping[str, str] | None = None,
) -> Telemetry:
    """Installs providers and instrumentations as the environment and `[telemetry]` ask.
    `resource_attributes`: more attributes of the resource (the instance id)."""
    env = os.environ
    result = Telemetry(config)
    if _is_true(env.get("OTEL_SDK_DISABLED")):
        log.info("OTEL_SDK_DISABLED=true: telemetry stays off")
        return result
    traces_endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    metrics_endpoint = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    want_traces = "otlp" in _env_list(env, "OTEL_TRACES_EXPORTER", "otlp") and bool(
        traces_endpoint or config.otlp_endpoint
    )
    metric_exporters = _env_list(env, "OTEL_METRICS_EXPORTER", "otlp")
    want_otlp_metrics = "otlp" in metric_exporters and bool(metrics_endpoint or config.otlp_endpoint)
    prometheus_at = prometheus_address(config, env)
    want_logs, logs_from_env = logs_endpoint(config, env)
    if not (want_traces or want_otlp_metrics or prometheus_at or want_logs):
        return result
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        from effectgate.gateway.config import ConfigError

        raise ConfigError(
            "telemetry: an exporter is configured (OTEL_EXPORTER_OTLP_*ENDPOINT, [telemetry]) but the "
            "OpenTelemetry SDK is not installed: pip install 'effectgate[otel]'"
        ) from None

    resource = Resource.create({**_resource_attributes(config, env), **(resource_attributes or {})})
    _propagators(env)
    if want_traces:
        result.tracer_provider = _tracing(config, env, resource, bool(traces_endpoint), adapters or {})
    if want_otlp_metrics or prometheus_at:
        _metrics(result, config, env, resource, want_otlp_metrics, bool(metrics_endpoint), prometheus_at)
    if want_logs:
        result.logs = start_log_export(config, env, resource, logs_from_env)
    return result


def _resource_attributes(config: TelemetryConfig, env: Mapping[str, str]) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    attributes = {}
    with contextlib.suppress(PackageNotFoundError):
        attributes["service.version"] = version("effectgate")
    # Resource.create lets explicit attributes override the environment's: name the service
    # only when the environment does not.
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not named:
        attributes["service.name"] = config.service_name
    return attributes


def _propagators(env: Mapping[str, str]) -> None:
    """W3C tracecontext only, unless OTEL_PROPAGATORS says otherwise: baggage from an agent is
    not forwarded to providers by default."""
    if env.get("OTEL_PROPAGATORS"):
        return
    from opentelemetry import propagate
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagate.set_global_textmap(TraceContextTextMapPropagator())


def _protocol(env: Mapping[str, str], signal: str, config: TelemetryConfig) -> str:
    return (
        env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or config.otlp_protocol
    ).strip()


def _configured_url(config: TelemetryConfig, protocol: str, path: str) -> str:
    base = config.otlp_endpoint.rstrip("/")
    return base if protocol == "grpc" else f"{base}/{path}"


def _tracing(
    config: TelemetryConfig, env: Mapping[str, str], resource: Any, from_env: bool, adapters: Mapping[str, Any]
) -> Any:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    protocol = _protocol(env, "TRACES", config)
    endpoint = None if from_env else _configured_url(config, protocol, "v1/traces")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        exporter: Any = GrpcSpanExporter(endpoint=endpoint)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    sampler = None  # the SDK reads OTEL_TRACES_SAMPLER / _ARG itself
    if not env.get("OTEL_TRACES_SAMPLER") and config.sample_ratio is not None:
        sampler = ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    calls.TRACING.on = True
    _instrument_httpx(adapters)
    _instrument_aiohttp()
    _instrument_asyncpg()
    log.info("tracing: OTLP %s export", protocol)
    return provider


def _metrics(
    result: Telemetry,
    config: TelemetryConfig,
    env: Mapping[str, str],
    resource: Any,
    otlp: bool,
    from_env: bool,
    prometheus_at: tuple[str, int] | None,
) -> None:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    readers: list[MetricReader] = []
    if otlp:
        protocol = _protocol(env, "METRICS", config)
        endpoint = None if from_env else _configured_url(config, protocol, "v1/metrics")
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

            exporter: Any = GrpcMetricExporter(endpoint=endpoint)
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

            exporter = OTLPMetricExporter(endpoint=endpoint)
        readers.append(PeriodicExportingMetricReader(exporter))
    if prometheus_at is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        result.prometheus = PrometheusMetricReader()
        readers.append(result.prometheus)
    provider = MeterProvider(resource=resource, metric_readers=readers)
    otel_metrics.set_meter_provider(provider)
    metrics.METERING.on = True
    result.meter_provider = provider


# -- instrumentations ------------------------------------------------------------------------


def redaction_list(adapters: Mapping[str, Mapping[str, Any]], env: Mapping[str, str]) -> str:
    """The operator's sanitize list plus ours plus every adapter's configured auth header."""
    names = [part.strip() for part in env.get(SANITIZE_ENV, "").split(",") if part.strip()]
    names += ALWAYS_REDACTED
    names += [str(settings["auth_header"]) for settings in adapters.values() if settings.get("auth_header")]
    return ",".join(dict.fromkeys(names))


def safe_url(url: Any, extensions: Mapping[str, Any] | None) -> str:
    """The URL as it may be recorded: the adapter's template if it gave one, else the URL with
    its query values replaced by `{}` (query values may be payload fields)."""
    import httpx

    parsed = url if isinstance(url, httpx.URL) else httpx.URL(str(url))
    origin = f"{parsed.scheme}://{parsed.host}" + (f":{parsed.port}" if parsed.port else "")
    template = (extensions or {}).get(URL_TEMPLATE)
    if isinstance(template, str) and template:
        if "://" in template:
            return template
        # A template relative to the adapter's base URL: keep the base's path prefix (the
        # segments before the template's; filled values are quoted, so never contain "/").
        path, mark, query = template.partition("?")
        segments = [s for s in path.split("/") if s]
        actual = [s for s in parsed.path.split("/") if s]
        prefix = actual[: max(0, len(actual) - len(segments))]
        return origin + "/" + "/".join(prefix + segments) + mark + query
    keys = [key for key, _ in parsed.params.multi_items()]
    query = "&".join(f"{key}={{}}" for key in keys)
    return origin + parsed.path + (f"?{query}" if query else "")


def _rewrite_url(span: Any, request: Any) -> None:
    if not span.is_recording():
        return
    safe = safe_url(request.url, request.extensions)
    recorded = getattr(span, "attributes", None) or {}
    for name in ("url.full", "http.url"):
        if name in recorded:
            span.set_attribute(name, safe)


async def _rewrite_url_async(span: Any, request: Any) -> None:
    _rewrite_url(span, request)


def _instrument_httpx(adapters: Mapping[str, Any]) -> None:
    try:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    except ImportError:
        log.warning("opentelemetry-instrumentation-httpx is not installed: provider calls have no client spans")
        return
    os.environ[SANITIZE_ENV] = redaction_list(adapters, os.environ)
    HTTPXClientInstrumentor().instrument(request_hook=_rewrite_url, async_request_hook=_rewrite_url_async)


def _instrument_aiohttp() -> None:
    """Client spans (and the `traceparent` header) for adapters on aiohttp, the Stripe SDK's client."""
    try:
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    except ImportError:
        return  # no adapter on aiohttp in this installation
    AioHttpClientInstrumentor().instrument(url_filter=lambda url: safe_url(str(url), None))


def _instrument_asyncpg() -> None:
    try:
        import asyncpg  # noqa: F401
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    except ImportError:
        return  # no PostgreSQL store in this installation
    AsyncPGInstrumentor().instrument()  # type: ignore[no-untyped-call]
