"""The gateway's own log records over OTLP, next to its spans (opt-in).

`OTEL_LOGS_EXPORTER=otlp` (or `none`) decides, else `[telemetry] otlp_logs`; the records go where
the traces go: `OTEL_EXPORTER_OTLP_LOGS_*` or `OTEL_EXPORTER_OTLP_*` as the SDK reads them, else
`[telemetry] otlp_endpoint` (`/v1/logs` on HTTP). An `OtlpLogHandler` on the root logger hands
each record to the SDK's `LoggerProvider` and `BatchLogRecordProcessor`, with the trace context of
the code that logged (so a warning carries the trace and span ids of its request), after the same
`RedactingFilter` as stderr: the body, the `extra=` fields and the exception text are redacted
before anything is exported. The SDK's own records (`opentelemetry.*`) and whatever is logged on
its export threads (the HTTP or gRPC client the exporter uses) are never exported: a failing
collector must not feed itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context

from effectgate.gateway.config import TelemetryConfig
from effectgate.gateway.observability.log_lines import SEVERITY_NUMBERS
from effectgate.gateway.observability.logging_setup import RedactingFilter, extra_fields

# OpenTelemetry log data model's short names, as the SDK's own handler writes them.
SEVERITY_TEXT = {"WARNING": "WARN", "CRITICAL": "FATAL"}
# The SDK's batch processors and metric reader run their exports on threads named "Otel…".
_SDK_THREAD = "Otel"
_emitting = threading.local()


def _env_list(env: Mapping[str, str], name: str) -> set[str] | None:
    if not env.get(name, "").strip():
        return None
    return {part.strip().lower() for part in env[name].split(",") if part.strip()}


def logs_endpoint(config: TelemetryConfig, env: Mapping[str, str]) -> tuple[bool, bool]:
    """(export logs over OTLP, the endpoint comes from the environment). The environment's
    OTEL_LOGS_EXPORTER wins over `[telemetry] otlp_logs`; either way an endpoint is needed."""
    chosen = _env_list(env, "OTEL_LOGS_EXPORTER")
    wanted = "otlp" in chosen if chosen is not None else config.otlp_logs
    from_env = bool(env.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    return wanted and (from_env or bool(config.otlp_endpoint)), from_env


class SdkRecords(logging.Filter):
    """Drops the records that would loop back into the exporter."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "opentelemetry" or record.name.startswith("opentelemetry."):
            return False
        return not (record.threadName or "").startswith(_SDK_THREAD) and not getattr(_emitting, "on", False)


class OtlpLogHandler(logging.Handler):
    """One logging record -> one OTLP log record (body, severity, `extra=` fields as attributes,
    the logger as the scope, the current trace context). Runs after `RedactingFilter`."""

    def __init__(self, provider: Any, level: int) -> None:
        super().__init__(level=level)
        self.provider = provider
        self.addFilter(SdkRecords())
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        from opentelemetry._logs import SeverityNumber

        _emitting.on = True
        try:
            attributes: dict[str, Any] = {
                key: value if isinstance(value, str | bool | int | float) else str(value)
                for key, value in extra_fields(record).items()
            }
            attributes["code.function.name"] = record.funcName
            attributes["code.line.number"] = record.lineno
            if record.exc_info and record.exc_info[0] is not None:
                attributes["exception.type"] = record.exc_info[0].__name__
            if record.exc_text:  # the redacted traceback (RedactingFilter formats and scrubs it)
                attributes["exception.stacktrace"] = record.exc_text
            self.provider.get_logger(record.name).emit(
                timestamp=int(record.created * 1e9),
                observed_timestamp=time.time_ns(),
                context=otel_context.get_current(),
                severity_number=SeverityNumber(SEVERITY_NUMBERS.get(record.levelname, 9)),
                severity_text=SEVERITY_TEXT.get(record.levelname, record.levelname),
                body=record.getMessage(),
                attributes=attributes,
            )
        except Exception:
            self.handleError(record)
        finally:
            _emitting.on = False


class LogExport:
    """The provider and its handler on the root logger; `shutdown` detaches, then flushes."""

    def __init__(self, provider: Any, handler: OtlpLogHandler) -> None:
        self.provider = provider
        self.handler = handler

    def shutdown(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        self.provider.shutdown()


def start_log_export(config: TelemetryConfig, env: Mapping[str, str], resource: Any, from_env: bool) -> LogExport:
    """Installs the pipeline: exporter of the configured protocol, batch processor, handler at
    the root logger's level (`--log-level`)."""
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    protocol = (
        env.get("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or config.otlp_protocol
    ).strip()
    base = config.otlp_endpoint.rstrip("/")
    endpoint = None if from_env else (base if protocol == "grpc" else f"{base}/v1/logs")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter

        exporter: Any = GrpcLogExporter(endpoint=endpoint)
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(endpoint=endpoint)
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    root = logging.getLogger()
    handler = OtlpLogHandler(provider, root.getEffectiveLevel())
    root.addHandler(handler)
    logging.getLogger("effectgate.telemetry").info("logs: OTLP %s export", protocol)
    return LogExport(provider, handler)
